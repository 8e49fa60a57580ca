//go:build !unix

package process

import (
	"fmt"
	"os/exec"
)

func exitDescription(ee *exec.ExitError) string {
	return fmt.Sprintf("exited with status %d", ee.ExitCode())
}
