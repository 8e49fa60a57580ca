//go:build linux

package confine

import (
	"os"
	"path/filepath"
	"syscall"
)

// SharedTmp are the node's folders any user may write to. An environment
// in namespaces of its own gets a tmpfs of its own over each (package
// nsinit); one without namespaces writes to the node's, and what it leaves
// there is removed (RemoveLeftovers) before its user id is lent again.
var SharedTmp = []string{"/tmp", "/var/tmp", "/dev/shm", "/run/lock"}

// RemoveLeftovers removes what the user uid left at the top of the node's
// shared folders (SharedTmp), and says how many entries. A link is removed,
// never followed. It runs while the id is lent to no environment.
func RemoveLeftovers(uid int) int {
	n := 0
	for _, dir := range SharedTmp {
		des, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, de := range des {
			p := filepath.Join(dir, de.Name())
			st, err := os.Lstat(p)
			if err != nil {
				continue
			}
			if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) == uid {
				if os.RemoveAll(p) == nil {
					n++
				}
			}
		}
	}
	return n
}
