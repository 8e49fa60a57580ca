package devstack

import "syscall"

// childSysProcAttr puts the gateway in its own process group, so Stop can
// signal it and anything it spawns as one unit, and asks the kernel to kill it
// when its parent dies, so a crashed test binary or a SIGKILLed dev server
// leaves no gateway behind. Pdeathsig fires when the creating OS thread exits;
// the Go runtime only retires threads whose goroutine exits while locked to
// them, which nothing here does.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
