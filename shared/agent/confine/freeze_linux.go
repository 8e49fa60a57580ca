package confine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// freezeWait bounds how long freezing a cgroup may take: a process in an
// uninterruptible sleep (a slow disk, a hung mount) delays it.
const freezeWait = 30 * time.Second

// FreezeCgroup freezes a cgroup v2 and waits until the kernel says every
// process of it is frozen (cgroup.events "frozen 1").
func FreezeCgroup(ctx context.Context, dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		return err
	}
	deadline := time.Now().Add(freezeWait)
	for wait := time.Millisecond; ; wait = min(wait*2, 50*time.Millisecond) {
		ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(ev), "\n") {
			if l == "frozen 1" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("its cgroup did not freeze within " + freezeWait.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// ThawCgroup thaws a cgroup FreezeCgroup froze.
func ThawCgroup(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
}
