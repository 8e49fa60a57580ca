//go:build !unix

package agent

import (
	"fmt"
	"os/exec"
)

// Outside Unix there are no process groups or SIGTERM: a stop kills the
// process itself.
func setProcessGroup(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd, _ bool) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

func exitDescription(ee *exec.ExitError) string {
	return fmt.Sprintf("exited with status %d", ee.ExitCode())
}

// lockWorkDir locks nothing outside Unix.
func lockWorkDir(string) (func(), error) { return func() {}, nil }
