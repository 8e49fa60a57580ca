//go:build unix

package process

import (
	"fmt"
	"os/exec"
	"syscall"
)

func exitDescription(ee *exec.ExitError) string {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ee.ExitCode())
}
