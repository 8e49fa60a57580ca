//go:build unix

package confine

import (
	"os/exec"
	"syscall"
)

// SetProcessGroup starts the command in its own process group, so a stop
// reaches everything it started, not just the first process.
func SetProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// KillGroup signals the command's process group: SIGTERM, or SIGKILL when hard.
func KillGroup(cmd *exec.Cmd, hard bool) {
	if cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
