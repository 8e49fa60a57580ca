package agent_test

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
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/domain"
)

// tinyFiles returns a .tgz of n empty files in 100 folders.
func tinyFiles(n int) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for i := range n {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%03d/f%05d", i%100, i), Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// manyFiles is the audit's first archive: 100,000 empty files.
var manyFiles = sync.OnceValues(func() ([]byte, error) { return tinyFiles(100_000) })

// zeros returns a .tar.zst of one file of size zero bytes per name, as
// `tar c | zstd` makes it: 1 GiB is some 33 KB. The zeros are streamed
// into the compressor, never held.
func zeros(size int64, names ...string) ([]byte, error) {
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	chunk := make([]byte, 1<<20)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			return nil, err
		}
		for left := size; left > 0; left -= int64(len(chunk)) {
			if _, err := tw.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// gibOfZeros is the audit's second archive: a 1 GiB file of zeros.
var gibOfZeros = sync.OnceValues(func() ([]byte, error) { return zeros(1<<30, "zero.bin") })

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
	many, gib := auditArchive(t, manyFiles), auditArchive(t, gibOfZeros)
	t.Logf("100,000 files: %d bytes as .tgz; 1 GiB of zeros: %d bytes as .tar.zst", len(many), len(gib))
	small, err := zeros(8<<20, "a.img", "b.img", "c.img")
	if err != nil {
		t.Fatal(err)
	}
	fewer, err := tinyFiles(5000)
	if err != nil {
		t.Fatal(err)
	}
	// One entry whose name implies 150 folders: each is an inode too.
	deep := archive(t, file(strings.Repeat("d/", 150)+"f", "x")).Bytes()
	errFull := errors.New("the node's disk is nearly full (test)")
	for _, c := range []struct {
		name    string
		archive []byte
		limits  agent.ArchiveLimits
		room    func() error
		want    string // "" = unpacked
		// readAtMost bounds the tar stream read before the refusal.
		readAtMost int64
	}{
		{name: "100,000 files past the entries limit", archive: many, limits: agent.ArchiveLimits{MaxEntries: 1000},
			want: "the archive exceeds 1000 entries (agent limit -archive-max-entries), at entry", readAtMost: 2 << 20},
		{name: "1 GiB of zeros past the default ratio", archive: gib,
			want: "more than 100 times its size beyond the first 64.0 MiB (agent limit -archive-max-ratio)", readAtMost: 1 << 20},
		{name: "1 GiB of zeros past the bytes limit", archive: gib, limits: agent.ArchiveLimits{MaxBytes: 512 << 20, MaxRatio: -1},
			want: "the archive exceeds 512.0 MiB unpacked (agent limit -archive-max-bytes)", readAtMost: 1 << 20},
		{name: "a node filling up as it unpacks", archive: many, room: func() error { return errFull },
			want: errFull.Error(), readAtMost: 4 << 20},
		{name: "one name of 150 folders past the entries limit", archive: deep, limits: agent.ArchiveLimits{MaxEntries: 100},
			want: "the archive exceeds 100 entries (agent limit -archive-max-entries), at entry", readAtMost: 1 << 20},
		{name: "5,000 files within the limits", archive: fewer, limits: agent.ArchiveLimits{MaxEntries: 5100}},
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
			budget := agent.NewBudget(c.limits)
			budget.Room = c.room
			src := &counter{r: tarStream(t, c.archive)}
			n, err := agent.UnpackTar(src, dst, agent.UnpackOptions{Budget: budget, Packed: int64(len(c.archive))})
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
		return archive(t, es...).Bytes()
	}
	dst := t.TempDir()
	budget := agent.NewBudget(agent.ArchiveLimits{MaxEntries: 1000})
	first, second := files("snapshot", 600), files("share", 600)
	if _, err := agent.UnpackTar(bytes.NewReader(first), dst, agent.UnpackOptions{Budget: budget, Packed: int64(len(first))}); err != nil {
		t.Fatal(err)
	}
	_, err := agent.UnpackTar(bytes.NewReader(second), dst, agent.UnpackOptions{Budget: budget, Packed: int64(len(second))})
	if err == nil || !strings.Contains(err.Error(), "the environment's archives exceed 1000 entries (agent limit -archive-max-entries)") {
		t.Fatalf("the second archive: %v", err)
	}
	if got := listing(t, dst); len(got) != 601 || got[0] != "snapshot" {
		t.Fatalf("left %d names, want the first archive's 601: %.5v", len(got), got)
	}
}

// Through the agent: the audit's archives fail their environments, naming
// the share or snapshot and the limit, and nothing of the environment is
// left on the node: the 100,000 files past a configured entries limit, the
// 1 GiB of zeros past the default ratio.
func TestAuditArchivesFailTheirEnvironments(t *testing.T) {
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, sharer, domain.Template{Name: "restore", Command: []string{"sleep", "3600"}})
	snaps.store = s.Store
	work := s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) {
		c.Archives.MaxEntries = 1000
		c.NoWarm = true
	})
	snaps.add(t, "art_many", auditArchive(t, manyFiles))
	snaps.add(t, "art_zeros", auditArchive(t, gibOfZeros))
	for _, c := range []struct {
		lease func() string
		want  []string
	}{
		{func() string { return s.leaseShare(t, "art_many") },
			[]string{`share "src"`, "exceeds 1000 entries (agent limit -archive-max-entries)"}},
		{func() string { return s.leaseSnapshot(t, "restore", "art_zeros") },
			[]string{"snapshot art_zeros", "would unpack to 1.0 GiB", "(agent limit -archive-max-ratio)"}},
	} {
		id := c.lease()
		e := s.wait(t, id, domain.StateFailed)
		for _, w := range c.want {
			if !strings.Contains(e.Error, w) {
				t.Fatalf("the error lacks %q: %q", w, e.Error)
			}
		}
		if _, err := os.Stat(filepath.Join(work, "envs", id)); !os.IsNotExist(err) {
			t.Fatalf("the failed environment's folder is left: %v", err)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(work, "envs")); len(left) != 0 {
		t.Fatalf("the work dir holds %v", left)
	}
}
