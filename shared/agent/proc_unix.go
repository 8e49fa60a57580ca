//go:build unix

package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// setProcessGroup starts the command in its own process group, so a stop
// reaches everything it started, not just the first process.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup signals the command's process group: SIGTERM, or SIGKILL when hard.
func killGroup(cmd *exec.Cmd, hard bool) {
	if cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}

func exitDescription(ee *exec.ExitError) string {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ee.ExitCode())
}

// lockWorkDir takes an exclusive lock on the work dir, so two agents never
// share one (each would take the other's folders for leftovers). The lock
// goes with the process, however it ends.
func lockWorkDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "agent.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent: work dir %s is in use by another agent: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
