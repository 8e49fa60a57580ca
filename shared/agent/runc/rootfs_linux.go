package runc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// makeWritable creates the writable folders in the mounted root filesystem,
// through an os.Root so that no link of the image leads the creation out,
// and checks that none of them crosses a symbolic link: runc binds each from
// rootfs+path, a path the node resolves, where an image's link to /etc
// would mean the node's /etc.
//
// Folders it creates are owned by owner (the container process's user as
// the node sees it), so that the container can write in them.
func makeWritable(rootfs string, list []string, owner [2]int) error {
	ws, err := WritablePaths(list)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if err := makeDir(rootfs, w, owner); err != nil {
			return fmt.Errorf("writable path %s: %w", w, err)
		}
	}
	return nil
}

// makeDir creates the folder p (absolute, inside) in rootfs, each folder it
// creates owned by owner (uid, gid), and refuses a path that crosses a
// symbolic link.
func makeDir(rootfs, p string, owner [2]int) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		st, err := root.Lstat(sub)
		if errors.Is(err, fs.ErrNotExist) {
			if err := root.Mkdir(sub, 0o755); err != nil {
				return err
			}
			if err := root.Lchown(sub, owner[0], owner[1]); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link in the image", "/"+sub)
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is not a folder in the image", "/"+sub)
		}
	}
	return nil
}

// makeTmp makes /tmp in the root filesystem, owned by the container's root
// (uid, gid as the node sees it) and open to all (1777), unless the image
// has it: a container's /tmp is its root filesystem's, on its disk.
func makeTmp(rootfs string, uid, gid int) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := root.Lstat("tmp"); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := root.Mkdir("tmp", 0o755); err != nil {
		return err
	}
	if err := root.Chmod("tmp", fs.ModeSticky|0o777); err != nil {
		return err
	}
	return root.Lchown("tmp", uid, gid)
}
