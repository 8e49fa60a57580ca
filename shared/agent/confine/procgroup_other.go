//go:build !unix

package confine

import (
	"os/exec"
)

// Outside Unix there are no process groups or SIGTERM: a stop kills the
// process itself.
func SetProcessGroup(*exec.Cmd) {}

func KillGroup(cmd *exec.Cmd, _ bool) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
