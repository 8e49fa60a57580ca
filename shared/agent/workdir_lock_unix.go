//go:build unix

package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

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
