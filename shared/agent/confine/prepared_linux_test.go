//go:build linux

package confine

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountOptions is the per-mount options of the mount at p, "" when p is no
// mount point (from /proc/self/mountinfo).
func mountOptions(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == p {
			opts = f[5] // the last mount there is the one seen
		}
	}
	return opts
}

// A box made ahead is what NewBox makes, moved to the environment's own
// folder when a start takes it: its disk mounted there (nosuid, nodev),
// owned by its user, its /tmp, its image named for it and a cgroup of its
// folder's name; nothing is left where it was made. A template whose disk
// is not the default size gets a new box. Close removes the boxes left,
// and a pool made again clears what an earlier one left.
func TestPreparedBoxes(t *testing.T) {
	disks := newTestDisks(t)
	users, err := NewUIDPool(UIDRange{First: 390000, Last: 390999})
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Users: users, Disks: disks, Namespaces: true, Log: slog.New(slog.DiscardHandler)}
	n.Cgroups, _ = CgroupParent()
	work := t.TempDir()
	envs, dir := filepath.Join(work, "envs"), filepath.Join(work, "prepared")
	if err := os.Mkdir(envs, 0o711); err != nil {
		t.Fatal(err)
	}
	size, err := disks.Size("64Mi")
	if err != nil {
		t.Fatal(err)
	}
	p := n.Prepare(dir, size, 2)
	p.Fill()
	waitReady := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); p.Ready() < want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d boxes made ahead, want %d", p.Ready(), want)
			}
		}
	}
	waitReady(2)

	ctx := context.Background()
	b, err := n.TakeBox(ctx, envs, "env_taken", size)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(envs, "env_taken")
	if b.Root != root || b.Disk == nil || b.Disk.Mount != root || b.Disk.Image != filepath.Join(disks.Dir, "env_taken.img") {
		t.Fatalf("taken box: root %s, disk %+v", b.Root, b.Disk)
	}
	if p.Ready() != 1 {
		t.Fatalf("%d boxes left made ahead, want 1", p.Ready())
	}
	opts := mountOptions(t, root)
	if !strings.Contains(opts, "nosuid") || !strings.Contains(opts, "nodev") {
		t.Fatalf("the disk at %s is mounted %q, want nosuid and nodev", root, opts)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil || int(st.Uid) != b.User.UID || st.Mode&0o777 != 0o700 {
		t.Fatalf("folder: uid %d mode %o (%v), want %d 0700", st.Uid, st.Mode&0o777, err, b.User.UID)
	}
	if fi, err := os.Stat(filepath.Join(root, TmpName)); err != nil || !fi.IsDir() {
		t.Fatalf("its /tmp: %v", err)
	}
	if n.Cgroups != "" && b.Cgroup != filepath.Join(n.Cgroups, "envlease-env_taken") {
		t.Fatalf("cgroup %q", b.Cgroup)
	}
	// Written to, it is the disk: the write counts there.
	if err := os.WriteFile(filepath.Join(root, "x"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 || filepath.Join(dir, left[0].Name()) != p.ready[0].Root {
		t.Fatalf("left where boxes are made: %v, want only the one made ahead", left)
	}

	// Another size: a box of its own, not one made ahead.
	other, err := disks.Size("32Mi")
	if err != nil {
		t.Fatal(err)
	}
	b2, err := n.TakeBox(ctx, envs, "env_other", other)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ready() != 1 || b2.Disk.Size != other {
		t.Fatalf("a box of another size: %d made ahead left, disk %+v", p.Ready(), b2.Disk.Size)
	}

	for _, x := range []*Box{b, b2} {
		n.Cleanup(x)
		if mountOptions(t, x.Root) != "" {
			t.Fatalf("%s is still mounted", x.Root)
		}
		if _, err := os.Stat(x.Root); !os.IsNotExist(err) {
			t.Fatalf("%s is left: %v", x.Root, err)
		}
	}
	p.Close()
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatalf("after Close, %d boxes are left in %s", len(des), dir)
	}
	if imgs, _ := filepath.Glob(filepath.Join(disks.Dir, "*.img")); len(imgs) != 0 {
		t.Fatalf("images left: %v", imgs)
	}

	// What a run that ended without Close left is cleared by the next.
	p = n.Prepare(dir, size, 1)
	p.Fill()
	waitReady(1)
	stale := p.ready[0]
	p.ready = nil // as if the agent had ended
	if mountOptions(t, stale.Root) == "" {
		t.Fatalf("a box made ahead is not mounted at %s", stale.Root)
	}
	stale.User.release()
	p = n.Prepare(dir, size, 1)
	p.Fill()
	waitReady(1)
	if mountOptions(t, stale.Root) != "" {
		t.Fatalf("%s, left by an earlier run, is still mounted", stale.Root)
	}
	p.Close()
}
