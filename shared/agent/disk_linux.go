package agent

import "syscall"

// statfs reads the DiskSpace of dir's filesystem. Free bytes are those an
// unprivileged user may write (f_bavail): environments run as users of
// their own, which the blocks reserved for root do not serve.
func statfs(dir string) (DiskSpace, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return DiskSpace{}, err
	}
	block := uint64(s.Frsize)
	if block == 0 {
		block = uint64(s.Bsize)
	}
	return DiskSpace{FreeBytes: s.Bavail * block, TotalBytes: s.Blocks * block, FreeInodes: s.Ffree, TotalInodes: s.Files}, nil
}
