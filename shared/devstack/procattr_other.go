//go:build unix && !linux

package devstack

import "syscall"

// childSysProcAttr puts the gateway in its own process group so Stop can
// signal it as one unit. Outside Linux there is no parent-death signal: if the
// parent is killed without running Stop, the gateway keeps running until it
// is killed by hand.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
