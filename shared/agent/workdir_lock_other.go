//go:build !unix

package agent

// lockWorkDir locks nothing outside Unix.
func lockWorkDir(string) (func(), error) { return func() {}, nil }
