package netstack

import (
	"errors"
	"io/fs"
	"os"
)

// ResolvConf is the resolv.conf of an environment behind a boundary: the
// stack's address, which the agent answers.
const ResolvConf = "nameserver 10.73.0.1\noptions edns0\n"

// WriteResolvConf puts ResolvConf at etc/resolv.conf of a container's root
// filesystem (whatever the image had there, a link included), through an
// os.Root so that nothing of the image can lead the write out of it.
func WriteResolvConf(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return err
	}
	if err := root.Remove("etc/resolv.conf"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile("etc/resolv.conf", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(ResolvConf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
