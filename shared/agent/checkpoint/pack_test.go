package checkpoint

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/domain"
)

// checkpointTree makes a tree of every kind a checkpoint keeps, and one it
// skips (a fifo, a link that leads out).
func checkpointTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, step := range []func() error{
		func() error { return os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755) },
		func() error { return os.WriteFile(filepath.Join(dir, "a/one.txt"), []byte("alpha"), 0o600) },
		func() error { return os.Chmod(filepath.Join(dir, "a/one.txt"), 0o640) },
		func() error { return os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600) },
		func() error { return os.WriteFile(filepath.Join(dir, "a/b/c/run.sh"), []byte("#!/bin/sh\n"), 0o700) },
		func() error { return os.Chmod(filepath.Join(dir, "a/b/c/run.sh"), 0o755) },
		func() error { return os.Symlink("one.txt", filepath.Join(dir, "a/link")) },
		func() error { return os.Symlink("/etc/passwd", filepath.Join(dir, "abs")) },
		func() error { return os.Mkdir(filepath.Join(dir, "private"), 0o700) },
		func() error { return os.Chmod(filepath.Join(dir, "a/b"), 0o750) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func packed(t *testing.T, dir string) ([]byte, domain.CheckpointManifest) {
	t.Helper()
	var buf bytes.Buffer
	m := domain.CheckpointManifest{Version: 1}
	if err := Pack(dir, &buf, &m, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), m
}

// restoreInto restores an archive as Restore does, without the
// download.
func restoreInto(arch []byte, dir string) error {
	m, err := ReadManifest(bytes.NewReader(arch), nil, 0)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := Unpack(bytes.NewReader(arch), root, nil, archive.UnpackOptions{}); err != nil {
		return err
	}
	return Verify(root, m)
}

// rewrite changes an archive's entries (change returns false to drop one)
// and its manifest (edit).
func rewrite(t *testing.T, arch []byte, change func(h *tar.Header, b []byte) ([]byte, bool), edit func(*domain.CheckpointManifest)) []byte {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(arch))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		keep := true
		if h.Name == domain.CheckpointManifestEntry {
			var m domain.CheckpointManifest
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if edit != nil {
				edit(&m)
			}
			b = mustJSON(t, m)
		} else if change != nil {
			b, keep = change(h, b)
		}
		if !keep {
			continue
		}
		h.Size = int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(b)
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A checkpoint restores byte for byte with modes; one that differs from
// its manifest is refused naming the first path that differs.
func TestCheckpointPackRestoreVerify(t *testing.T) {
	src := checkpointTree(t)
	arch, m := packed(t, src)
	if !strings.Contains(strings.Join(m.Skipped, ","), "abs") {
		t.Errorf("skipped %v, want abs (a link that leads out)", m.Skipped)
	}
	cases := []struct {
		name    string
		arch    []byte
		wantErr string // "" restores
	}{
		{"as packed", arch, ""},
		{"content changed", rewrite(t, arch, func(h *tar.Header, b []byte) ([]byte, bool) {
			if h.Name == "a/one.txt" {
				return []byte("ALPHA"), true
			}
			return b, true
		}, nil), "a/one.txt differs from its manifest: its SHA-256"},
		{"file left out", rewrite(t, arch, func(h *tar.Header, b []byte) ([]byte, bool) { return b, h.Name != "a/b/c/run.sh" }, nil),
			"a/b/c/run.sh differs from its manifest: it is missing"},
		{"file not in manifest", rewrite(t, arch, nil, func(m *domain.CheckpointManifest) {
			for i, f := range m.Files {
				if f.Path == "empty" {
					m.Files = append(m.Files[:i], m.Files[i+1:]...)
					return
				}
			}
		}), "empty differs from its manifest: the archive holds it"},
		{"link retargeted", rewrite(t, arch, func(h *tar.Header, b []byte) ([]byte, bool) {
			if h.Name == "a/link" {
				h.Linkname = "b"
			}
			return b, true
		}, nil), `a/link differs from its manifest: it links to "b"`},
		{"size changed", rewrite(t, arch, func(h *tar.Header, b []byte) ([]byte, bool) {
			if h.Name == "empty" {
				return []byte("x"), true
			}
			return b, true
		}, nil), "empty differs from its manifest: it holds 1 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := t.TempDir()
			err := restoreInto(c.arch, dst)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, again := packed(t, dst)
			if len(again.Files) != len(m.Files) {
				t.Fatalf("restored %d entries, packed %d", len(again.Files), len(m.Files))
			}
			for i := range m.Files {
				if again.Files[i] != m.Files[i] {
					t.Errorf("restored %+v, packed %+v", again.Files[i], m.Files[i])
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A container's init folder is made of mount points: a checkpoint neither
// packs it nor restores an archive that holds it (a replaced mount point
// loses its mount, and the container would run what the archive put there).
func TestCheckpointLeavesReservedNamesAlone(t *testing.T) {
	dir := checkpointTree(t)
	if err := os.MkdirAll(filepath.Join(dir, ".envlease/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".envlease/init"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	m := domain.CheckpointManifest{Version: 1}
	if err := Pack(dir, &buf, &m, []string{".envlease"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if strings.HasPrefix(f.Path, ".envlease") {
			t.Errorf("packed %s", f.Path)
		}
	}
	// An archive that holds it anyway (packed without the reservation) is
	// refused when restored where it is reserved.
	arch, _ := packed(t, dir)
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = Unpack(bytes.NewReader(arch), root, []string{".envlease"}, archive.UnpackOptions{})
	if err == nil || !strings.Contains(err.Error(), "is the node's") {
		t.Fatalf("restoring a reserved name: %v", err)
	}
}
