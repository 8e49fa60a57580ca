//go:build linux

package confine

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func newTestDisks(t testing.TB) *Disks {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("disks of their own need root")
	}
	d, err := NewDisks(filepath.Join(t.TempDir(), "disks"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A disk bounds bytes and inodes in the kernel: writes past either fail
// with ENOSPC, Full says which, and the image on the node holds no more
// than the disk's size. Removing it unmounts it and deletes the image.
func TestDiskBoundsBytesAndInodes(t *testing.T) {
	d := newTestDisks(t)
	for _, tc := range []struct {
		name  string
		fill  func(dir string) error
		full  string
		bytes bool
	}{
		{"bytes", func(dir string) error {
			f, err := os.Create(filepath.Join(dir, "big"))
			if err != nil {
				return err
			}
			defer f.Close()
			buf := make([]byte, 1<<20)
			for i := 0; i < 64; i++ {
				if _, err := f.Write(buf); err != nil {
					return err
				}
			}
			return nil
		}, "is full", true},
		{"inodes", func(dir string) error {
			for i := 0; i < 1_000_000; i++ {
				f, err := os.Create(filepath.Join(dir, "f"+strings.Repeat("x", i%3)+strconv.Itoa(i)))
				if err != nil {
					return err
				}
				f.Close()
			}
			return nil
		}, "inodes", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mount := filepath.Join(t.TempDir(), "mnt")
			if err := os.Mkdir(mount, 0o700); err != nil {
				t.Fatal(err)
			}
			size, err := d.Size("32Mi")
			if err != nil {
				t.Fatal(err)
			}
			disk, err := d.Make(context.Background(), "t-"+tc.name, mount, size, &[2]int{4242, 4242})
			if err != nil {
				t.Fatal(err)
			}
			defer disk.Remove()
			var st syscall.Stat_t
			if err := syscall.Stat(mount, &st); err != nil || st.Uid != 4242 {
				t.Fatalf("the disk's root is owned by %d (%v), want 4242", st.Uid, err)
			}
			if got := disk.Full(); got != "" {
				t.Fatalf("a new disk is full: %s", got)
			}
			if err := tc.fill(mount); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling it: %v, want ENOSPC", err)
			}
			if got := disk.Full(); !strings.Contains(got, tc.full) {
				t.Errorf("Full() = %q, want it to say %q", got, tc.full)
			}
			var img syscall.Stat_t
			if err := syscall.Stat(disk.Image, &img); err != nil {
				t.Fatal(err)
			}
			if used := img.Blocks * 512; uint64(used) > size.Bytes {
				t.Errorf("the image takes %d bytes of the node, over the disk's %d", used, size.Bytes)
			}
			if err := disk.Remove(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(disk.Image); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the image is left: %v", err)
			}
			if des, _ := os.ReadDir(mount); len(des) != 0 {
				t.Errorf("the mount point still shows %d entries", len(des))
			}
		})
	}
}

// Sizes: the node's default, a template's, and one beyond the maximum.
func TestDiskSize(t *testing.T) {
	d := &Disks{Default: 10 << 30, Max: 20 << 30}
	for _, tc := range []struct {
		spec   string
		bytes  uint64
		refuse string
	}{
		{"", 10 << 30, ""},
		{"1Gi", 1 << 30, ""},
		{"1Ki", minDisk, ""},
		{"21Gi", 0, "beyond this node's maximum of 20Gi"},
		{"lots", 0, "not a size"},
	} {
		got, err := d.Size(tc.spec)
		switch {
		case tc.refuse != "":
			if err == nil || !strings.Contains(err.Error(), tc.refuse) {
				t.Errorf("%q: %v, want an error saying %q", tc.spec, err, tc.refuse)
			}
		case err != nil || got.Bytes != tc.bytes || got.Inodes != tc.bytes/BytesPerInode:
			t.Errorf("%q: %+v, %v; want %d bytes", tc.spec, got, err, tc.bytes)
		}
	}
}

// What a disk adds to an environment's cold start: making a box (folder,
// user id) with and without one; removing it is not timed (it comes after
// the environment). A warm environment's disk is made before its
// lease, so a warm lease pays none of it.
//
//	go test ./shared/agent/confine -run '^$' -bench Box -benchtime 50x
func BenchmarkBox(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("users and disks of their own need root")
	}
	users, err := NewUIDPool(DefaultUIDRange)
	if err != nil {
		b.Fatal(err)
	}
	disks := newTestDisks(b)
	size, _ := disks.Size("")
	for _, bc := range []struct {
		name  string
		disks *Disks
	}{{"no disk", nil}, {"10Gi disk", disks}} {
		b.Run(bc.name, func(b *testing.B) {
			n := &Node{Users: users, Disks: bc.disks, Log: slog.New(slog.DiscardHandler)}
			dir := b.TempDir()
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				box, err := n.NewBox(ctx, filepath.Join(dir, "env-"+strconv.Itoa(i)), size)
				if err != nil {
					b.Fatal(err)
				}
				// Its removal is after the environment, not before its start.
				b.StopTimer()
				n.Cleanup(box)
				b.StartTimer()
			}
		})
	}
}

// What a user id left at the top of the node's shared folders is removed,
// a link without following it; what others own stays.
func TestRemoveLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("files of another user need root")
	}
	const uid = 299998
	dir, err := os.MkdirTemp("/tmp", "envlease-leftover-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := dir + "-link"
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	for _, p := range []string{dir, link} {
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	other, err := os.MkdirTemp("/tmp", "envlease-other-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(other)
	if n := RemoveLeftovers(uid); n < 2 {
		t.Errorf("removed %d entries, want the folder and the link", n)
	}
	for _, p := range []string{dir, link} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left: %v", p, err)
		}
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "kept" {
		t.Errorf("the link's target: %q %v", b, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another's folder went: %v", err)
	}
}

// TestLeanMkfs: the lean filesystem is used where mkfs.ext4 makes it, and
// the disks are made as before where it refuses its options (e2fsprogs
// before 1.43).
func TestLeanMkfs(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, script string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := fake("old-mkfs", `case "$*" in *sparse_super2*|*num_backup_sb*) echo "Invalid filesystem option set" >&2; exit 1;; esac; exit 0`)
	if leanMkfs(old, dir) {
		t.Fatal("an mkfs that refuses sparse_super2 was taken for a lean one")
	}
	if !leanMkfs(fake("new-mkfs", "exit 0"), dir) {
		t.Fatal("an mkfs that takes the options was not taken for a lean one")
	}
	if real, err := exec.LookPath("mkfs.ext4"); err == nil {
		t.Logf("this node's mkfs.ext4 makes lean disks: %v", leanMkfs(real, dir))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "probe-*")); len(left) > 0 {
		t.Fatalf("the probes were left behind: %v", left)
	}
}
