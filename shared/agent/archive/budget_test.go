package archive_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/agent/archive/archivetest"
)

func auditArchive(t *testing.T, gen func() ([]byte, error)) []byte {
	t.Helper()
	b, err := gen()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// counter counts what is read through it.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// tarStream undoes the compression of a test archive.
func tarStream(t *testing.T, b []byte) io.Reader {
	t.Helper()
	if !bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) && !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return bytes.NewReader(b) // a plain tar
	}
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return zr
	}
	zr, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zr.Close)
	return zr
}

// listing is every name under dir, relative, with a file's size.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if info.Mode().IsRegular() {
			rel = fmt.Sprintf("%s:%d", rel, info.Size())
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// The audit's archives are refused at the first entry past a limit, before
// that entry is written and long before the archive's end, with an error
// that names the limit's flag; what they unpacked is removed again, and
// what the folder held before (a folder they wrote into among it) stays.
// A small archive of zeros passes whatever its ratio.
func TestArchiveLimits(t *testing.T) {
	many, gib := auditArchive(t, archivetest.ManyFiles), auditArchive(t, archivetest.GiBOfZeros)
	t.Logf("100,000 files: %d bytes as .tgz; 1 GiB of zeros: %d bytes as .tar.zst", len(many), len(gib))
	small, err := archivetest.Zeros(8<<20, "a.img", "b.img", "c.img")
	if err != nil {
		t.Fatal(err)
	}
	fewer, err := archivetest.TinyFiles(5000)
	if err != nil {
		t.Fatal(err)
	}
	// One entry whose name implies 150 folders: each is an inode too.
	deep := tarOf(t, file(strings.Repeat("d/", 150)+"f", "x")).Bytes()
	errFull := errors.New("the node's disk is nearly full (test)")
	for _, c := range []struct {
		name    string
		archive []byte
		limits  archive.Limits
		room    func() error
		want    string // "" = unpacked
		// readAtMost bounds the tar stream read before the refusal.
		readAtMost int64
	}{
		{name: "100,000 files past the entries limit", archive: many, limits: archive.Limits{MaxEntries: 1000},
			want: "the archive exceeds 1000 entries (agent limit -archive-max-entries), at entry", readAtMost: 2 << 20},
		{name: "1 GiB of zeros past the default ratio", archive: gib,
			want: "more than 100 times its size beyond the first 64.0 MiB (agent limit -archive-max-ratio)", readAtMost: 1 << 20},
		{name: "1 GiB of zeros past the bytes limit", archive: gib, limits: archive.Limits{MaxBytes: 512 << 20, MaxRatio: -1},
			want: "the archive exceeds 512.0 MiB unpacked (agent limit -archive-max-bytes)", readAtMost: 1 << 20},
		{name: "a node filling up as it unpacks", archive: many, room: func() error { return errFull },
			want: errFull.Error(), readAtMost: 4 << 20},
		{name: "one name of 150 folders past the entries limit", archive: deep, limits: archive.Limits{MaxEntries: 100},
			want: "the archive exceeds 100 entries (agent limit -archive-max-entries), at entry", readAtMost: 1 << 20},
		{name: "5,000 files within the limits", archive: fewer, limits: archive.Limits{MaxEntries: 5100}},
		{name: "a small archive of zeros within the allowance", archive: small},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := t.TempDir()
			// The folder holds a file of its own, and one in a folder the
			// archive writes into.
			for _, f := range []string{"keep", "d000/mine"} {
				if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dst, f), []byte("before"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := listing(t, dst)
			budget := archive.NewBudget(c.limits)
			budget.Room = c.room
			src := &counter{r: tarStream(t, c.archive)}
			n, err := archive.UnpackTar(src, dst, archive.UnpackOptions{Budget: budget, Packed: int64(len(c.archive))})
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := len(listing(t, dst)) - len(before); int64(got) != budget.Entries() || n == 0 {
					t.Fatalf("%d files, %d new names, %d entries counted", n, got, budget.Entries())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (%d files), want an error with %q", err, n, c.want)
			}
			if src.n > c.readAtMost {
				t.Fatalf("read %d bytes of the archive before refusing it, want at most %d", src.n, c.readAtMost)
			}
			if after := listing(t, dst); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Fatalf("after the refusal the folder holds %d names, before %d: %.10v", len(after), len(before), after)
			}
		})
	}
}

// One budget counts every archive of an environment: the second archive
// that takes the total past a limit is refused and removed, naming the
// environment's archives, while the first stays.
func TestArchiveBudgetSpansAnEnvironmentsArchives(t *testing.T) {
	files := func(prefix string, n int) []byte {
		var es []entry
		for i := range n {
			es = append(es, file(fmt.Sprintf("%s/f%03d", prefix, i), "x"))
		}
		return tarOf(t, es...).Bytes()
	}
	dst := t.TempDir()
	budget := archive.NewBudget(archive.Limits{MaxEntries: 1000})
	first, second := files("snapshot", 600), files("share", 600)
	if _, err := archive.UnpackTar(bytes.NewReader(first), dst, archive.UnpackOptions{Budget: budget, Packed: int64(len(first))}); err != nil {
		t.Fatal(err)
	}
	_, err := archive.UnpackTar(bytes.NewReader(second), dst, archive.UnpackOptions{Budget: budget, Packed: int64(len(second))})
	if err == nil || !strings.Contains(err.Error(), "the environment's archives exceed 1000 entries (agent limit -archive-max-entries)") {
		t.Fatalf("the second archive: %v", err)
	}
	if got := listing(t, dst); len(got) != 601 || got[0] != "snapshot" {
		t.Fatalf("left %d names, want the first archive's 601: %.5v", len(got), got)
	}
}

// Names are held to their limits as each header is read: one name or link
// target past the length limit, and names past the total, are refused at
// the entry that passes the limit, and the error quotes a name refused for
// its length by its start only.
func TestArchiveNameLimits(t *testing.T) {
	long := strings.Repeat("n", 5000)
	var many []entry
	for i := range 100 {
		many = append(many, file(fmt.Sprintf("%s/%03d", strings.Repeat("m", 200), i), ""))
	}
	for _, c := range []struct {
		name    string
		entries []entry
		limits  archive.Limits
		want    string
		notWant string
	}{
		{name: "a name past the default length", entries: []entry{file("ok", "x"), file(long, "x")},
			want: `a name of 4.9 KiB exceeds 4096 bytes (agent limit -archive-max-name), at entry "nnnn`, notWant: long[:100]},
		{name: "a link target past the length", entries: []entry{symlink("l", long)}, limits: archive.Limits{MaxNameBytes: 1000},
			want: `the target of entry "l": a name of 4.9 KiB exceeds 1000 bytes (agent limit -archive-max-name)`},
		{name: "names past the total", entries: many, limits: archive.Limits{MaxNamesBytes: 10_000},
			want: "the archive exceeds 9.8 KiB of names (agent limit -archive-max-names), at entry"},
		{name: "within the limits", entries: many, limits: archive.Limits{MaxNamesBytes: 100_000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := archive.UnpackTar(tarOf(t, c.entries...), t.TempDir(), archive.UnpackOptions{Budget: archive.NewBudget(c.limits)})
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if c.notWant != "" && strings.Contains(err.Error(), c.notWant) {
				t.Fatalf("the error quotes the whole name: %.200s…", err)
			}
			if len(err.Error()) > 300 {
				t.Fatalf("the error is %d bytes long", len(err.Error()))
			}
		})
	}
}

// Extended header records other than names (a comment, xattrs) count
// against the total of names: an archive made of them stops there.
func TestArchiveHeaderRecordsCount(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range 100 {
		h := &tar.Header{Name: fmt.Sprintf("f%03d", i), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"comment": strings.Repeat("c", 100_000)}}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := archive.UnpackTar(&buf, t.TempDir(), archive.UnpackOptions{Budget: archive.NewBudget(archive.Limits{MaxNamesBytes: 1 << 20})})
	if err == nil || !strings.Contains(err.Error(), `the archive exceeds 1.0 MiB of names (agent limit -archive-max-names), at entry "f010"`) {
		t.Fatalf("got %v", err)
	}
}
