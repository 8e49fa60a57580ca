//go:build linux

package image

import (
	"archive/tar"
	"os"

	"golang.org/x/sys/unix"
)

func mknodAt(dir *os.File, base string, h *tar.Header) error {
	mode := uint32(h.Mode & 0o7777)
	switch h.Typeflag {
	case tar.TypeChar:
		mode |= unix.S_IFCHR
	case tar.TypeBlock:
		mode |= unix.S_IFBLK
	default:
		mode |= unix.S_IFIFO
	}
	dev := unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))
	return unix.Mknodat(int(dir.Fd()), base, mode, int(dev))
}
