//go:build !linux

package devstack

// listensOn reports true where /proc does not say who holds a socket: an
// answer on the port stands.
func listensOn(pid, port int) bool { return true }
