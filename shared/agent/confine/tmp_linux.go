//go:build linux

package confine

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/envlease/envlease/shared/agent/nsinit"
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

// ShmSize bounds an environment's /dev/shm (and /run/lock), tmpfs whose
// pages are memory: Docker's default size for a container's /dev/shm.
const ShmSize = 64 << 20

// TmpMounts are what covers the node's shared folders in the box's mount
// namespace: its own TmpName folder as /tmp and /var/tmp, bounded by its
// disk; a tmpfs of ShmSize as /dev/shm and /run/lock.
func (b *Box) TmpMounts() []nsinit.TmpMount {
	tmp := filepath.Join(b.Root, TmpName)
	shm := fmt.Sprintf("size=%d,nr_inodes=%d", ShmSize, ShmSize/BytesPerInode)
	return []nsinit.TmpMount{{Path: "/tmp", Source: tmp}, {Path: "/var/tmp", Source: tmp},
		{Path: "/dev/shm", Options: shm}, {Path: "/run/lock", Options: shm}}
}
