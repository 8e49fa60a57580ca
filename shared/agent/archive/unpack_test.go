package archive_test

import (
	"archive/tar"
	"bytes"
	"github.com/envlease/envlease/shared/agent/archive/archivetest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/archive"
)

// The members of test archives, and the archive of them (archivetest).
type entry = archivetest.Entry

var (
	file     = archivetest.File
	dir      = archivetest.Dir
	symlink  = archivetest.Symlink
	hardlink = archivetest.Hardlink
)

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer { return archivetest.Tar(t, entries...) }

// unpackPlace is a destination folder next to a sibling folder that holds
// one file, "target"; nothing an archive unpacked into dst may change the
// sibling.
type unpackPlace struct{ dst, sibling string }

func newPlace(t *testing.T) unpackPlace {
	base := t.TempDir()
	p := unpackPlace{dst: filepath.Join(base, "dst"), sibling: filepath.Join(base, "sibling")}
	for _, d := range []string{p.dst, p.sibling} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(p.sibling, "target"), []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkSibling fails unless the sibling holds just its file, unchanged and
// with no second name.
func (p unpackPlace) checkSibling(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(p.sibling)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "target" {
		t.Fatalf("the sibling folder holds %v: something was written outside the destination", names)
	}
	st, err := os.Stat(filepath.Join(p.sibling, "target"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(p.sibling, "target"))
	if string(b) != "untouched" || st.Sys().(*syscall.Stat_t).Nlink != 1 {
		t.Fatalf("the sibling's file changed: %q, %d links", b, st.Sys().(*syscall.Stat_t).Nlink)
	}
}

// Archives that try to write outside the destination are refused, whatever
// the way: a chain of links built from earlier entries (each link textually
// inside), absolute or climbing link targets, hard links out, .. and
// absolute names, device files and fifos, and links that were in the folder
// before. The error names the entry refused, and nothing lands outside.
func TestUnpackTarConfinesEveryWrite(t *testing.T) {
	escape := "envlease-escape-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cases := []struct {
		name    string
		setup   func(t *testing.T, p unpackPlace)
		entries func(p unpackPlace) []entry
		refused string // the entry the error names
		outside func(p unpackPlace) string
	}{
		{
			name: "five links deep through a link to its own folder",
			entries: func(unpackPlace) []entry {
				return []entry{symlink("s", "."), symlink("s/s/s/s/s/x", "../../../../.."), file("x/"+escape, "out")}
			},
			refused: "x/" + escape,
			outside: func(p unpackPlace) string { return filepath.Join(p.dst, "../../../../..", escape) },
		},
		{
			name: "a chain into the sibling",
			entries: func(unpackPlace) []entry {
				return []entry{symlink("s", "."), symlink("s/x", "../sibling"), file("x/evil", "out")}
			},
			refused: "x/evil",
		},
		{
			name: "a folder through a chain",
			entries: func(unpackPlace) []entry {
				return []entry{symlink("s", "."), symlink("s/x", "../sibling"), dir("x/newdir/")}
			},
			refused: "x/newdir/",
		},
		{
			name: "a file below a folder made through a chain",
			entries: func(unpackPlace) []entry {
				return []entry{symlink("s", "."), symlink("s/x", "../sibling"), file("x/sub/evil", "out")}
			},
			refused: "x/sub/evil",
		},
		{
			name:    "an absolute link target",
			entries: func(p unpackPlace) []entry { return []entry{symlink("abs", p.sibling), file("abs/evil", "out")} },
			refused: "abs",
		},
		{
			name:    "a climbing link target",
			entries: func(unpackPlace) []entry { return []entry{symlink("d/up", "../../sibling"), file("d/up/evil", "out")} },
			refused: "d/up",
		},
		{
			name:    "a hard link out by ..",
			entries: func(unpackPlace) []entry { return []entry{hardlink("h", "../sibling/target")} },
			refused: "h",
		},
		{
			name:    "an absolute hard link",
			entries: func(p unpackPlace) []entry { return []entry{hardlink("h", filepath.Join(p.sibling, "target"))} },
			refused: "h",
		},
		{
			name: "a hard link through a chain",
			entries: func(unpackPlace) []entry {
				return []entry{symlink("s", "."), symlink("s/x", "../sibling"), hardlink("h", "x/target")}
			},
			refused: "h",
		},
		{
			name:    "a name with ..",
			entries: func(unpackPlace) []entry { return []entry{file("a/../../sibling/evil", "out")} },
			refused: "a/../../sibling/evil",
		},
		{
			name:    "an absolute name",
			entries: func(p unpackPlace) []entry { return []entry{file(filepath.Join(p.sibling, "evil"), "out")} },
			refused: "/evil",
		},
		{
			name:    "a device file",
			entries: func(unpackPlace) []entry { return []entry{{Name: "null", Type: tar.TypeChar}} },
			refused: "null",
		},
		{
			name:    "a block device",
			entries: func(unpackPlace) []entry { return []entry{{Name: "disk", Type: tar.TypeBlock}} },
			refused: "disk",
		},
		{
			name:    "a fifo",
			entries: func(unpackPlace) []entry { return []entry{{Name: "pipe", Type: tar.TypeFifo}} },
			refused: "pipe",
		},
		{
			name: "an absolute link already in the folder",
			setup: func(t *testing.T, p unpackPlace) {
				if err := os.Symlink(p.sibling, filepath.Join(p.dst, "pre")); err != nil {
					t.Fatal(err)
				}
			},
			entries: func(unpackPlace) []entry { return []entry{file("pre/evil", "out")} },
			refused: "pre/evil",
		},
		{
			name: "a climbing link already in the folder",
			setup: func(t *testing.T, p unpackPlace) {
				if err := os.Symlink("../sibling", filepath.Join(p.dst, "pre")); err != nil {
					t.Fatal(err)
				}
			},
			entries: func(unpackPlace) []entry { return []entry{dir("pre/sub/"), file("pre/sub/evil", "out")} },
			refused: "pre/sub/",
		},
		{
			name: "a hard link to a link already in the folder",
			setup: func(t *testing.T, p unpackPlace) {
				if err := os.Symlink(filepath.Join(p.sibling, "target"), filepath.Join(p.dst, "pre")); err != nil {
					t.Fatal(err)
				}
			},
			entries: func(unpackPlace) []entry { return []entry{hardlink("h", "pre")} },
			refused: "h",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPlace(t)
			if c.setup != nil {
				c.setup(t, p)
			}
			_, err := archive.UnpackTar(tarOf(t, c.entries(p)...), p.dst, archive.UnpackOptions{})
			if err == nil {
				t.Fatal("the archive was unpacked")
			}
			if !strings.Contains(err.Error(), c.refused+`"`) {
				t.Fatalf("the error does not name the entry %q: %v", c.refused, err)
			}
			p.checkSibling(t)
			if c.outside != nil {
				if _, err := os.Lstat(c.outside(p)); !os.IsNotExist(err) {
					t.Fatalf("%s exists after the unpack: %v", c.outside(p), err)
				}
			}
		})
	}
}

// What an archive may hold is unpacked: folders, files, links that stay
// inside, hard links to its files; a file replaces a link of its name that
// was in the folder (it does not write through it), and a link's target
// that a link chain makes textually look inside is created as it is (it is
// never followed out).
func TestUnpackTarUnpacksWhatStaysInside(t *testing.T) {
	p := newPlace(t)
	if err := os.Symlink(filepath.Join(p.sibling, "target"), filepath.Join(p.dst, "victim")); err != nil {
		t.Fatal(err)
	}
	n, err := archive.UnpackTar(tarOf(t,
		dir("./"), dir("d/"), file("d/f", "ok"), file("e/deep/g", "deep"), symlink("d/link", "f"),
		symlink("up", "d/../e/deep/g"), hardlink("d/hard", "d/f"), file("victim", "replaced"),
		symlink("s", "."), file("s/s/via", "through a link inside"),
	), p.dst, archive.UnpackOptions{})
	if err != nil || n != 5 {
		t.Fatalf("unpack: %d files, %v", n, err)
	}
	for name, want := range map[string]string{
		"d/f": "ok", "d/link": "ok", "up": "deep", "d/hard": "ok", "victim": "replaced", "via": "through a link inside",
	} {
		if b, err := os.ReadFile(filepath.Join(p.dst, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", name, b, err, want)
		}
	}
	a, _ := os.Stat(filepath.Join(p.dst, "d/f"))
	b, _ := os.Stat(filepath.Join(p.dst, "d/hard"))
	if !os.SameFile(a, b) {
		t.Error("the hard link is a copy")
	}
	if st, _ := os.Lstat(filepath.Join(p.dst, "victim")); !st.Mode().IsRegular() {
		t.Errorf("victim is %s", st.Mode())
	}
	p.checkSibling(t)
}

// With an owner (the environment's user, when the agent is root), every
// entry the archive creates is the owner's, links and folders included.
func TestUnpackTarGivesEntriesToTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("handing files to another user takes root")
	}
	p := newPlace(t)
	const uid, gid = 299998, 299997
	_, err := archive.UnpackTar(tarOf(t, dir("d/"), file("d/f", "x"), file("e/g", "y"), symlink("l", "d/f")),
		p.dst, archive.UnpackOptions{Owner: &archive.Owner{UID: uid, GID: gid}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"d", "d/f", "e", "e/g", "l"} {
		st, err := os.Lstat(filepath.Join(p.dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != uid || s.Gid != gid {
			t.Errorf("%s is %d:%d, want %d:%d", name, s.Uid, s.Gid, uid, gid)
		}
	}
	if st, _ := os.Stat(p.dst); st.Sys().(*syscall.Stat_t).Uid == uid {
		t.Error("the destination itself changed owner")
	}
}
