//go:build !linux

package process

import "os"

// stampOf elsewhere: the size and modify time (the agent confines
// environments on Linux alone).
func stampOf(fi os.FileInfo) fileStamp {
	return fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}
