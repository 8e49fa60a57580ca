package envfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/envfiles"
)

// nobody is the user the tests act as when they run as root.
const nobody = 65534

// newRoot makes an environment's root with a few files and links that
// try to leave it, and a secret beside it that nothing may reach.
func newRoot(t *testing.T, inRoot bool, writable []string) (Root, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	for _, d := range []string{"etc", "tmp", "work", "proc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(base, "secret")
	must(t, os.WriteFile(secret, []byte("the node's"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "etc", "hosts"), []byte("inside"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "work", "mine"), []byte("hello"), 0o600))
	must(t, os.Symlink(secret, filepath.Join(dir, "work", "abs-out")))
	must(t, os.Symlink("../../secret", filepath.Join(dir, "work", "rel-out")))
	must(t, os.Symlink("/etc", filepath.Join(dir, "tmp", "etc-link")))
	must(t, os.Symlink("/proc/self/root", filepath.Join(dir, "work", "magic")))
	r := Root{Dir: dir, Home: "work", InRoot: inRoot, Writable: writable, UID: os.Getuid(), GID: os.Getgid()}
	if os.Getuid() == 0 {
		for _, p := range []string{"tmp", "work", filepath.Join("work", "mine")} {
			must(t, os.Chown(filepath.Join(dir, p), nobody, nobody))
		}
		r.UID, r.GID, r.AsUser = nobody, nobody, true
	}
	return r, secret
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func reason(err error) string {
	var e *envfiles.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if err == nil {
		return ""
	}
	return "not an envfiles.Error: " + err.Error()
}

// No path leaves the root: .., links out (absolute or relative), /proc
// and magic links are refused with a reason that says so, or (a
// container's absolute links) resolve inside it; the secret beside the
// root is never read.
func TestPathsThatTryToLeave(t *testing.T) {
	for _, inRoot := range []bool{false, true} {
		r, secret := newRoot(t, inRoot, nil)
		f, err := Open(r)
		must(t, err)
		defer f.Close()
		cases := []struct {
			path, want, wantInRoot string
		}{
			{"../secret", envfiles.ReasonOutsideRoot, envfiles.ReasonOutsideRoot},
			{"/work/../../secret", envfiles.ReasonOutsideRoot, envfiles.ReasonOutsideRoot},
			{"/proc/self/environ", envfiles.ReasonSpecialPath, envfiles.ReasonSpecialPath},
			{"/sys/kernel", envfiles.ReasonSpecialPath, envfiles.ReasonSpecialPath},
			// Absolute links: out for a process; the container's own / for a container.
			{"abs-out", envfiles.ReasonOutsideRoot, envfiles.ReasonNotFound},
			{"rel-out", envfiles.ReasonOutsideRoot, envfiles.ReasonNotFound},
			{"magic/etc/hostname", envfiles.ReasonOutsideRoot, envfiles.ReasonNotFound},
			{"", envfiles.ReasonBadPath, envfiles.ReasonBadPath},
			{"a\x00b", envfiles.ReasonBadPath, envfiles.ReasonBadPath},
		}
		for _, c := range cases {
			want := c.want
			if inRoot {
				want = c.wantInRoot
			}
			rc, _, err := f.OpenFile(c.path)
			if rc != nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				t.Errorf("inRoot=%v %q: read %q", inRoot, c.path, b)
			}
			if got := reason(err); got != want {
				t.Errorf("inRoot=%v read %q: %s (%v), want %s", inRoot, c.path, got, err, want)
			}
			// A write replaces a link at the path's end with a file (a
			// rename over it), never writing where it points.
			_, err = f.Write(c.path, strings.NewReader("x"), nil, false, make([]byte, 16))
			if reason(err) == "" && !strings.HasSuffix(c.path, "-out") {
				t.Errorf("inRoot=%v write %q: allowed", inRoot, c.path)
			}
		}
		if b, _ := os.ReadFile(secret); string(b) != "the node's" {
			t.Errorf("the secret beside the root is now %q", b)
		}
		// Inside, a container's absolute link means its own root.
		if inRoot {
			rc, _, err := f.OpenFile("/tmp/etc-link/hosts")
			must(t, err)
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != "inside" {
				t.Errorf("a container's /etc link read %q", b)
			}
		}
	}
}

// A container writes only below its writable paths, checked where the
// kernel resolved the folder: a link from a writable path to a read-only
// one does not carry a write there.
func TestReadOnlyPathsStayReadOnly(t *testing.T) {
	r, _ := newRoot(t, true, []string{"/tmp", "/work"})
	f, err := Open(r)
	must(t, err)
	defer f.Close()
	buf := make([]byte, 16)
	for _, p := range []string{"/etc/hosts", "/etc/new", "/tmp/etc-link/hosts", "/tmp/etc-link/new"} {
		if _, err := f.Write(p, strings.NewReader("x"), nil, false, buf); reason(err) != envfiles.ReasonReadOnly {
			t.Errorf("write %s: %v, want read_only", p, err)
		}
	}
	if _, err := f.Mkdir("/etc/d", 0o755, false); reason(err) != envfiles.ReasonReadOnly {
		t.Errorf("mkdir /etc/d: %v", err)
	}
	if err := f.Remove("/etc/hosts", false); reason(err) != envfiles.ReasonReadOnly {
		t.Errorf("remove /etc/hosts: %v", err)
	}
	if err := f.Remove("/tmp", true); reason(err) != envfiles.ReasonReadOnly {
		t.Errorf("remove /tmp itself: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, "etc", "hosts")); string(b) != "inside" {
		t.Errorf("/etc/hosts is now %q", b)
	}
	if _, err := f.Write("/tmp/ok", strings.NewReader("x"), nil, false, buf); err != nil {
		t.Errorf("write /tmp/ok: %v", err)
	}
}

// Files are read, written, listed, made and removed as the environment's
// user: a write is atomic, has the mode asked for (or the replaced file's)
// and belongs to that user; what the user may not read stays unread.
func TestFilesAsTheEnvironmentsUser(t *testing.T) {
	r, _ := newRoot(t, false, nil)
	f, err := Open(r)
	must(t, err)
	defer f.Close()
	buf := make([]byte, 7)
	m := fs.FileMode(0o640)
	fi, err := f.Write("sub/dir/file", bytes.NewReader(bytes.Repeat([]byte("ab"), 1000)), &m, true, buf)
	must(t, err)
	if fi.Size != 2000 || fi.Mode != "0640" || fi.Path != "/work/sub/dir/file" || fi.Type != envfiles.TypeFile {
		t.Errorf("written: %+v", fi)
	}
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(r.Dir, "work/sub/dir/file"), &st))
	if int(st.Uid) != r.UID || int(st.Gid) != r.GID {
		t.Errorf("owned by %d:%d, want %d:%d", st.Uid, st.Gid, r.UID, r.GID)
	}
	// A rewrite without a mode keeps the file's.
	fi, err = f.Write("sub/dir/file", strings.NewReader("new"), nil, false, buf)
	must(t, err)
	if fi.Mode != "0640" || fi.Size != 3 {
		t.Errorf("rewritten: %+v", fi)
	}
	// A failed upload leaves the old file and no temporary.
	_, err = f.Write("sub/dir/file", io.MultiReader(strings.NewReader("partial"), errReader{}), nil, false, buf)
	if err == nil {
		t.Fatal("a failing upload succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, "work/sub/dir/file")); string(b) != "new" {
		t.Errorf("after a failed upload: %q", b)
	}
	l, err := f.List("sub/dir")
	must(t, err)
	if len(l.Entries) != 1 || l.Entries[0].Name != "file" {
		t.Errorf("list after a failed upload: %+v", l)
	}
	l, err = f.List("/work")
	must(t, err)
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name+":"+e.Type)
	}
	if got := strings.Join(names, " "); got != "abs-out:symlink magic:symlink mine:file rel-out:symlink sub:dir" {
		t.Errorf("list: %s", got)
	}
	if _, err := f.Mkdir("sub", 0, false); reason(err) != envfiles.ReasonExists {
		t.Errorf("mkdir of an existing folder: %v", err)
	}
	if _, err := f.Mkdir("sub", 0o755, true); err != nil {
		t.Errorf("mkdir -p of an existing folder: %v", err)
	}
	if err := f.Remove("sub", false); reason(err) != envfiles.ReasonNotEmpty {
		t.Errorf("remove a full folder: %v", err)
	}
	must(t, f.Remove("sub", true))
	if _, err := f.Stat("sub"); reason(err) != envfiles.ReasonNotFound {
		t.Errorf("stat after remove: %v", err)
	}
	if _, _, err := f.OpenFile("/work"); reason(err) != envfiles.ReasonIsDir {
		t.Errorf("read a folder: %v", err)
	}
	if r.AsUser {
		// The node's root owns /etc: the environment's user cannot write there.
		if _, err := f.Write("/etc/new", strings.NewReader("x"), nil, false, buf); reason(err) != envfiles.ReasonPermission {
			t.Errorf("write into root's /etc as nobody: %v", err)
		}
		must(t, os.Chown(filepath.Join(r.Dir, "etc", "hosts"), 0, 0))
		must(t, os.Chmod(filepath.Join(r.Dir, "etc", "hosts"), 0o600))
		if _, _, err := f.OpenFile("/etc/hosts"); reason(err) != envfiles.ReasonPermission {
			t.Errorf("read root's 0600 file as nobody: %v", err)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("the connection dropped") }

// A watch reports what changes in the folder, and below it when recursive,
// and ends when the folder goes.
func TestWatch(t *testing.T) {
	r, _ := newRoot(t, false, nil)
	f, err := Open(r)
	must(t, err)
	defer f.Close()
	w, err := f.Watch("/work", true)
	must(t, err)
	defer w.Close()
	ch := make(chan envfiles.FileChange, 100)
	ended := make(chan string, 1)
	go func() {
		ended <- w.Run(context.Background(), func(c envfiles.FileChange) error { ch <- c; return nil })
	}()
	buf := make([]byte, 64)
	_, err = f.Mkdir("/work/d", 0o755, false)
	must(t, err)
	await := func(op, p string) {
		t.Helper()
		for {
			select {
			case c := <-ch:
				if c.Op == op && c.Path == p {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s of %s", op, p)
			}
		}
	}
	await(envfiles.OpCreate, "/work/d")
	_, err = f.Write("/work/d/x", strings.NewReader("1"), nil, false, buf)
	must(t, err)
	await(envfiles.OpCreate, "/work/d/x")
	must(t, os.WriteFile(filepath.Join(r.Dir, "work", "mine"), []byte("more"), 0o600))
	await(envfiles.OpWrite, "/work/mine")
	must(t, f.Remove("/work/mine", false))
	await(envfiles.OpRemove, "/work/mine")
	must(t, os.RemoveAll(filepath.Join(r.Dir, "work")))
	select {
	case why := <-ended:
		if why == "" {
			t.Error("the watch ended without a reason")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end with its folder")
	}
	for c := range len(ch) {
		_ = c
		if c := <-ch; strings.Contains(c.Path, TempPrefix) {
			t.Errorf("a temporary file was reported: %+v", c)
		}
	}
}

// A request scoped to a folder (a ticket's path) reaches nothing outside it
// through a link below it, though the environment's user could: every
// route is judged where the kernel resolved the path, not by its name.
func TestScopeHoldsThroughLinks(t *testing.T) {
	for _, inRoot := range []bool{false, true} {
		r, _ := newRoot(t, inRoot, nil)
		other := filepath.Join(r.Dir, "other")
		must(t, os.MkdirAll(other, 0o755))
		must(t, os.WriteFile(filepath.Join(other, "note"), []byte("outside the scope"), 0o644))
		if r.AsUser {
			must(t, os.Chown(other, r.UID, r.GID))
			must(t, os.Chown(filepath.Join(other, "note"), r.UID, r.GID))
		}
		must(t, os.Symlink("../other", filepath.Join(r.Dir, "work", "to-other")))
		must(t, os.Symlink("../work/mine", filepath.Join(r.Dir, "work", "to-mine")))
		r.Scope = "/work"
		f, err := Open(r)
		must(t, err)
		defer f.Close()
		buf := make([]byte, 16)
		refused := map[string]error{}
		if rc, _, err := f.OpenFile("/work/to-other/note"); err == nil {
			rc.Close()
			refused["read"] = errors.New("read")
		} else {
			refused["read"] = err
		}
		_, refused["list"] = f.List("/work/to-other")
		_, refused["stat"] = f.Stat("/work/to-other/note")
		_, refused["write"] = f.Write("/work/to-other/new", strings.NewReader("x"), nil, false, buf)
		_, refused["write parents"] = f.Write("/work/to-other/d/new", strings.NewReader("x"), nil, true, buf)
		_, refused["mkdir"] = f.Mkdir("/work/to-other/d", 0o755, false)
		_, refused["mkdir parents"] = f.Mkdir("/work/to-other/a/b", 0o755, true)
		refused["remove"] = f.Remove("/work/to-other/note", false)
		if w, err := f.Watch("/work/to-other", false); err == nil {
			w.Close()
			refused["watch"] = errors.New("watched")
		} else {
			refused["watch"] = err
		}
		for what, err := range refused {
			if reason(err) != envfiles.ReasonOutsideTicket {
				t.Errorf("inRoot %v: %s through a link out of the scope: %v, want %s", inRoot, what, err, envfiles.ReasonOutsideTicket)
			}
		}
		names, _ := os.ReadDir(other)
		if len(names) != 1 {
			t.Errorf("inRoot %v: the folder outside the scope now holds %d entries", inRoot, len(names))
		}
		// Links that stay inside the scope, and the links themselves, are
		// the scope's.
		if rc, _, err := f.OpenFile("/work/to-mine"); err != nil {
			t.Errorf("inRoot %v: read through a link inside the scope: %v", inRoot, err)
		} else {
			rc.Close()
		}
		if _, err := f.Stat("/work/to-other"); err != nil {
			t.Errorf("inRoot %v: stat of the link itself: %v", inRoot, err)
		}
		if _, err := f.Mkdir("/work/x/y", 0o755, true); err != nil {
			t.Errorf("inRoot %v: mkdir -p inside the scope: %v", inRoot, err)
		}
		if err := f.Remove("/work/to-other", false); err != nil {
			t.Errorf("inRoot %v: remove the link itself: %v", inRoot, err)
		}
	}
}

// A panic while acting as the environment's user is that request's error:
// the agent goes on, and the next request acts as the user again.
func TestPanicAsUserIsAnError(t *testing.T) {
	r, _ := newRoot(t, true, nil)
	if !r.AsUser {
		t.Skip("acting as another user needs root")
	}
	f, err := Open(r)
	must(t, err)
	defer f.Close()
	err = f.asUser(func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic as the user: %v, want an error naming it", err)
	}
	var fsuid int
	must(t, f.asUser(func() error { fsuid, _ = unix.SetfsuidRetUid(-1); return nil }))
	if fsuid != r.UID {
		t.Errorf("after the panic a request acts as %d, want %d", fsuid, r.UID)
	}
	if u, _ := unix.SetfsuidRetUid(-1); u != os.Getuid() {
		t.Errorf("this thread acts as %d", u)
	}
}

// A recursive watch reads a large folder in batches and watches every
// folder in it, however many files are beside them; a tree of more folders
// than MaxWatchFolders is refused.
func TestWatchLargeFolders(t *testing.T) {
	r, _ := newRoot(t, false, nil)
	f, err := Open(r)
	must(t, err)
	defer f.Close()
	work := filepath.Join(r.Dir, "work")
	for i := range 3 * readBatch {
		must(t, os.WriteFile(filepath.Join(work, fmt.Sprintf("f%04d", i)), nil, 0o644))
		if i%3 == 0 {
			must(t, os.MkdirAll(filepath.Join(work, fmt.Sprintf("d%04d", i), "deep"), 0o755))
		}
	}
	w, err := f.Watch("/work", true)
	must(t, err)
	if got, want := len(w.wds), 1+2*readBatch; got != want {
		t.Errorf("watched %d folders, want %d", got, want)
	}
	w.Close()
	for i := range MaxWatchFolders {
		must(t, os.Mkdir(filepath.Join(work, fmt.Sprintf("e%04d", i)), 0o755))
	}
	if _, err := f.Watch("/work", true); reason(err) != envfiles.ReasonTooManyFolders {
		t.Errorf("a watch of more than %d folders: %v", MaxWatchFolders, err)
	}
	if w, err := f.Watch("/work", false); err != nil {
		t.Errorf("a watch of the folder alone: %v", err)
	} else {
		w.Close()
	}
}
