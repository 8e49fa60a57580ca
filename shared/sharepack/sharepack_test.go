package sharepack_test

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/sharepack"
)

// tree is a folder's content: a path ending in "/" is a folder, "-> x" a
// symbolic link to x, anything else a file's content.
type tree map[string]string

// make writes t into a new folder in the order names gives, and returns the
// folder.
func (tr tree) make(t *testing.T, names []string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		v, p := tr[name], filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(name, "/")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(v, "-> "):
			err = os.Symlink(strings.TrimPrefix(v, "-> "), p)
		default:
			err = os.WriteFile(p, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func (tr tree) names() []string {
	out := make([]string, 0, len(tr))
	for k := range tr {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var sample = tree{
	"README.md":            "hello",
	"src/":                 "",
	"src/main.go":          "package main",
	"src/app.log":          "noise",
	"logs/":                "",
	"logs/today.txt":       "excluded with its folder",
	"node_modules/":        "",
	"node_modules/x/y.js":  "excluded anywhere",
	"web/node_modules/z":   "excluded anywhere",
	"docs/":                "",
	"docs/current":         "-> ../README.md",
	"docs/self":            "-> .",
	"escape":               "-> ../outside",
	"deep/escape":          "-> ../../outside",
	"absolute":             "-> /etc/passwd",
	"src/nested/deeper/ok": "-> ../../main.go",
}

func pathsOf(l sharepack.Listing) []string {
	var out []string
	for _, e := range l.Entries {
		out = append(out, e.Path)
	}
	return out
}

// The template's patterns and the request's are applied with the service's
// rule (a base name anywhere, a folder with what it holds); links that stay
// inside are kept, the others left out with a reason.
func TestListAppliesExcludesAndKeepsOnlyInsideLinks(t *testing.T) {
	dir := sample.make(t, sample.names())
	l, err := sharepack.List(dir, []string{"*.log", "node_modules", "logs"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"README.md", "deep", "docs", "docs/current", "docs/self", "src", "src/main.go",
		"src/nested", "src/nested/deeper", "src/nested/deeper/ok", "web"}
	if got := pathsOf(l); !slices.Equal(got, want) {
		t.Fatalf("entries\n got %q\nwant %q", got, want)
	}
	skipped := map[string]string{}
	for _, s := range l.Skipped {
		skipped[s.Path] = s.Why
	}
	if len(skipped) != 3 || !strings.Contains(skipped["absolute"], "absolute") || !strings.Contains(skipped["escape"], "leads out") ||
		!strings.Contains(skipped["deep/escape"], "leads out") {
		t.Fatalf("skipped %q", l.Skipped)
	}
	if names := l.Names(); !slices.Equal(names, []string{"README.md", "docs/current", "docs/self", "src/main.go", "src/nested/deeper/ok"}) {
		t.Fatalf("names %q", names)
	}
	if l.Files != 5 || l.Bytes != int64(len("hello")+len("package main")) {
		t.Fatalf("files %d, bytes %d", l.Files, l.Bytes)
	}
}

// A folder given through a symbolic link is the folder it leads to.
func TestListFollowsALinkToTheFolder(t *testing.T) {
	dir := tree{"a.txt": "alpha"}.make(t, []string{"a.txt"})
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	l, err := sharepack.List(link, nil)
	if err != nil || !slices.Equal(pathsOf(l), []string{"a.txt"}) {
		t.Fatalf("listing through a link: %q %v", pathsOf(l), err)
	}
}

func TestListRefusesAFile(t *testing.T) {
	dir := tree{"f": "x"}.make(t, []string{"f"})
	if _, err := sharepack.List(filepath.Join(dir, "f"), nil); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("err %v", err)
	}
}

func pack(t *testing.T, dir string, exclude ...string) []byte {
	t.Helper()
	l, err := sharepack.List(dir, exclude)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := sharepack.Write(&b, l, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The same content packs to the same bytes, whenever and in whatever order
// its files were made, and nothing of the packing user is in the archive.
func TestWriteIsDeterministic(t *testing.T) {
	names := sample.names()
	one := pack(t, sample.make(t, names), "*.log")
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	// Folders first, so the reversed order can create what is in them.
	slices.SortStableFunc(reversed, func(a, b string) int {
		return strings.Count(a, "/") - strings.Count(b, "/")
	})
	second := sample.make(t, reversed)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := filepath.WalkDir(second, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, old, old)
	}); err != nil {
		t.Fatal(err)
	}
	two := pack(t, second, "*.log")
	if !bytes.Equal(one, two) {
		t.Fatal("the same tree packed to different bytes")
	}
	zr, err := zstd.NewReader(bytes.NewReader(one))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.ModTime.Unix() != 0 {
			t.Fatalf("%s: uid %d gid %d %q %q at %s", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
	}
}

// What sharepack packs, the agent unpacks without refusing anything.
func TestPackedShareUnpacksWithTheAgent(t *testing.T) {
	dir := sample.make(t, sample.names())
	zr, err := zstd.NewReader(bytes.NewReader(pack(t, dir, "node_modules")))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	out := t.TempDir()
	files, err := archive.UnpackTar(zr, out, archive.UnpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if files != 4 { // README.md, src/main.go, src/app.log, logs/today.txt: links are not files
		t.Fatalf("unpacked %d files", files)
	}
	b, err := os.ReadFile(filepath.Join(out, "docs", "current"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("docs/current: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "src", "nested", "deeper", "ok")); string(b) != "package main" {
		t.Fatalf("src/nested/deeper/ok: %q", b)
	}
	for _, gone := range []string{"escape", "absolute", "node_modules", "web/node_modules"} {
		if _, err := os.Lstat(filepath.Join(out, gone)); !os.IsNotExist(err) {
			t.Errorf("%s was unpacked: %v", gone, err)
		}
	}
}
