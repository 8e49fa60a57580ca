//go:build linux

package confine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Disk is one environment's filesystem, mounted.
type Disk struct {
	Image, Mount string
	Size         DiskSize
}

// NewDisks checks that the node can make environments' disks (mkfs.ext4,
// loop devices) and makes dir, which holds their images.
func NewDisks(dir string, def, max uint64) (*Disks, error) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if err == nil {
			break
		}
		if _, serr := os.Stat(p); serr == nil {
			mkfs, err = p, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("environments' disks need mkfs.ext4 (e2fsprogs): %w", err)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return nil, fmt.Errorf("environments' disks need loop devices: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if def == 0 {
		def = DefaultDisk
	}
	if max == 0 {
		max = DefaultMaxDisk
	}
	if def > max {
		return nil, fmt.Errorf("the default disk (%d bytes) is beyond the maximum (%d bytes)", def, max)
	}
	return &Disks{Dir: dir, Default: def, Max: max, Mkfs: mkfs, Lean: leanMkfs(mkfs, dir)}, nil
}

// leanMkfs says whether mkfs makes the lean filesystem (mkfsFeatures
// with lean), tried once on a small sparse file in dir.
func leanMkfs(mkfs, dir string) bool {
	f, err := os.CreateTemp(dir, "probe-*.img")
	if err != nil {
		return false
	}
	defer os.Remove(f.Name())
	err = f.Truncate(64 << 20)
	f.Close()
	if err != nil {
		return false
	}
	args := append([]string{"-q", "-F", "-t", "ext4", "-N", "1024"}, mkfsFeatures(true, 0, 0)...)
	return exec.Command(mkfs, append(args, f.Name())...).Run() == nil
}

// mkfsFeatures are mkfs.ext4's -O and -E options for an environment's disk.
// -m 0: no blocks reserved for root, the environment gets its size;
// lazy_itable_init: inode tables are not written now (the mount's
// noinit_itable keeps the kernel from writing them later), which is what
// keeps the image sparse and mkfs quick. The disk is never grown nor
// repaired from a backup (it ends with its environment), so a lean one
// reserves no group descriptors for growing (^resize_inode) and keeps no
// backup superblocks (sparse_super2, num_backup_sb=0): a 10 GiB disk then
// writes about 130 KiB of metadata instead of 4.3 MiB, and mkfs takes a
// third of the time. What mkfs writes lands in the node's page cache and
// is written out later, on whatever the node then does.
func mkfsFeatures(lean bool, uid, gid int) []string {
	if !lean {
		return []string{"-m", "0", "-O", "^has_journal", "-E", fmt.Sprintf("lazy_itable_init=1,nodiscard,root_owner=%d:%d", uid, gid)}
	}
	return []string{"-m", "0", "-O", "^has_journal,^resize_inode,sparse_super2",
		"-E", fmt.Sprintf("lazy_itable_init=1,nodiscard,num_backup_sb=0,root_owner=%d:%d", uid, gid)}
}

// Make makes the disk of the environment named id and mounts it at mount
// (an existing, empty folder), its root folder owned by owner (nil: root).
// The image is sparse: it takes only what is written. The filesystem has
// no journal (it never outlives the environment, nor a crash of the node)
// and discards what is deleted, so the node gets the space back at once.
func (d *Disks) Make(ctx context.Context, id string, mount string, size DiskSize, owner *[2]int) (_ *Disk, err error) {
	img := filepath.Join(d.Dir, id+".img")
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("environment's disk: %w", err)
	}
	defer func() {
		f.Close()
		if err != nil {
			os.Remove(img)
		}
	}()
	if err := f.Truncate(int64(size.Bytes)); err != nil {
		return nil, fmt.Errorf("environment's disk: %w", err)
	}
	uid, gid := 0, 0
	if owner != nil {
		uid, gid = owner[0], owner[1]
	}
	args := append([]string{"-q", "-F", "-t", "ext4", "-N", strconv.FormatUint(size.Inodes, 10)}, mkfsFeatures(d.Lean, uid, gid)...)
	args = append(args, img)
	if out, err := exec.CommandContext(ctx, d.Mkfs, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("environment's disk: mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	loop, err := attachLoop(f)
	if err != nil {
		return nil, fmt.Errorf("environment's disk: %w", err)
	}
	// The loop device clears itself once the mount is gone (autoclear);
	// until the mount holds it, this descriptor does.
	defer loop.Close()
	if err := unix.Mount(loop.Name(), mount, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "discard,noinit_itable,errors=remount-ro"); err != nil {
		return nil, fmt.Errorf("environment's disk: mount %s: %w", loop.Name(), err)
	}
	_ = os.Remove(filepath.Join(mount, "lost+found"))
	return &Disk{Image: img, Mount: mount, Size: size}, nil
}

// moveTo moves the mounted disk to mount (an existing, empty folder) and
// renames its image to image: a bind mount of the filesystem there (which
// keeps the mount's nosuid and nodev), then its first mount removed. That
// is what a box made ahead costs a start (PreparedBoxes), against mkfs and
// a mount of the filesystem anew. On failure the disk stays where it was.
func (d *Disk) moveTo(mount, image string) error {
	if err := unix.Mount(d.Mount, mount, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("environment's disk: bind it at %s: %w", mount, err)
	}
	if err := unix.Unmount(d.Mount, 0); err != nil {
		_ = unix.Unmount(mount, unix.MNT_DETACH)
		return fmt.Errorf("environment's disk: unmount %s: %w", d.Mount, err)
	}
	d.Mount = mount
	if err := os.Rename(d.Image, image); err == nil {
		d.Image = image
	}
	return nil
}

// attachLoop gives f a loop device of its own, which detaches itself once
// its last holder is gone.
func attachLoop(f *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	// Another program may take the free device between the two calls:
	// LOOP_CONFIGURE then says EBUSY, and another is asked for.
	for tries := 0; ; tries++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) || tries >= 16 {
			return nil, fmt.Errorf("configure %s: %w", dev.Name(), err)
		}
	}
}

// Full says, when the disk has no room left for the environment (no
// space, or no inode), which; "" while it has some.
func (d *Disk) Full() string {
	if d == nil {
		return ""
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.Mount, &st); err != nil {
		return ""
	}
	switch {
	case st.Files > 0 && st.Ffree == 0:
		return fmt.Sprintf("all %d inodes of its disk are used (files, folders and links; resources.disk gives one per %d bytes)", d.Size.Inodes, BytesPerInode)
	case st.Bavail*uint64(st.Bsize) < 1<<20:
		return fmt.Sprintf("its disk of %d bytes is full (resources.disk)", d.Size.Bytes)
	}
	return ""
}

// Used is what the environment wrote to its disk (bytes of blocks in use,
// the filesystem's own included); -1 when it cannot be read.
func (d *Disk) Used() int64 {
	if d == nil {
		return -1
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.Mount, &st); err != nil {
		return -1
	}
	return int64(st.Blocks-st.Bfree) * int64(st.Bsize)
}

// Remove unmounts the disk (lazily while something still holds it: it
// goes with the last holder) and deletes its image; it is idempotent.
func (d *Disk) Remove() error {
	if d == nil {
		return nil
	}
	return RemoveDisk(d.Mount, d.Image)
}

// RemoveDisk unmounts whatever is mounted at mount and deletes image: what
// an environment, or an earlier run of the agent, left.
func RemoveDisk(mount, image string) error {
	var errs []error
	if err := UnmountAll(mount); err != nil {
		errs = append(errs, err)
	}
	if image != "" {
		if err := os.Remove(image); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// UnmountAll unmounts p however many times it is mounted (a folder can be
// mounted over more than once), detaching it when busy. A p that is not a
// mount point is no error.
func UnmountAll(p string) error {
	for i := 0; i < 8; i++ {
		err := unix.Unmount(p, 0)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not (or no longer) a mount point
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		default:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", p)
}

// RemoveLeftDisks deletes the images in the disks' folder that no live
// environment holds (keep): what an earlier run of the agent left, whose
// mounts its caller removed already.
func (d *Disks) RemoveLeftDisks(keep func(id string) bool) int {
	des, err := os.ReadDir(d.Dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, de := range des {
		id, ok := strings.CutSuffix(de.Name(), ".img")
		if !ok || keep(id) {
			continue
		}
		if os.Remove(filepath.Join(d.Dir, de.Name())) == nil {
			n++
		}
	}
	return n
}
