//go:build unix

package buildcache

import (
	"io/fs"
	"syscall"
)

// diskBytes is what a file takes on disk: its blocks, not its length.
func diskBytes(st fs.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int64(s.Blocks) * 512
	}
	return st.Size()
}

func ownerOf(st fs.FileInfo) Owner {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return Owner{UID: int(s.Uid), GID: int(s.Gid)}
	}
	return Owner{-1, -1}
}
