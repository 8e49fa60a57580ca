package process

import (
	"os"
	"syscall"
)

// stampOf reads the file's device, inode and change time too.
func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = uint64(sys.Dev), sys.Ino
		st.ctime = sys.Ctim.Sec*1e9 + sys.Ctim.Nsec
	}
	return st
}
