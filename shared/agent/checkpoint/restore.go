package agent

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// checkpointVersion is the manifest's version this agent writes and reads.
const checkpointVersion = 1

// maxManifestBytes bounds a checkpoint's manifest (about 200 bytes a file).
const maxManifestBytes = 64 << 20

// restoreCheckpoint restores a checkpoint artifact into the environment's
// root (a process's folder, a container's root filesystem: where it was
// taken): its entries are checked against its manifest, unpacked through
// the confined unpacker within the environment's budget, then every file
// the manifest lists is verified (type, size, SHA-256, link target) and
// given the manifest's mode. The first path that differs fails the
// restore, and so the environment: never a silent partial restore.
func (a *Agent) restoreCheckpoint(ctx context.Context, s *nodes.Snapshot, fsys runtimes.Files, budget *Budget) (*domain.Restored, error) {
	f, err := a.fetch(ctx, s, "checkpoint "+s.ID)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := readCheckpointManifest(f)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", s.ID, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(fsys.Root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	files, err := unpackCheckpoint(f, root, fsys.Reserved, UnpackOptions{Owner: ownerOf(fsys), Budget: budget, Packed: s.Size})
	if err != nil {
		return nil, fmt.Errorf("unpack checkpoint %s: %w", s.ID, err)
	}
	if err := verifyCheckpoint(root, m); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", s.ID, err)
	}
	return &domain.Restored{Key: s.ID, Root: fsys.Root, Files: files, Created: s.Created}, nil
}

// readCheckpointManifest reads the archive once: the manifest (its last
// entry), and that every other entry is one the manifest lists.
func readCheckpointManifest(r io.Reader) (*domain.CheckpointManifest, error) {
	src, done, err := decompressed(r)
	if err != nil {
		return nil, err
	}
	defer done()
	tr := tar.NewReader(src)
	var (
		names []string
		m     *domain.CheckpointManifest
	)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if m != nil {
			return nil, fmt.Errorf("%s follows its manifest", h.Name)
		}
		if h.Name == domain.CheckpointManifestEntry {
			b, err := io.ReadAll(io.LimitReader(tr, maxManifestBytes+1))
			if err != nil {
				return nil, err
			}
			if len(b) > maxManifestBytes {
				return nil, errors.New("its manifest is too large")
			}
			m = &domain.CheckpointManifest{}
			if err := json.Unmarshal(b, m); err != nil {
				return nil, fmt.Errorf("its manifest does not read: %w", err)
			}
			continue
		}
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/"))
	}
	if m == nil {
		return nil, errors.New("it has no manifest: not a checkpoint")
	}
	if m.Version != checkpointVersion {
		return nil, fmt.Errorf("its manifest is of version %d; this node reads version %d", m.Version, checkpointVersion)
	}
	listed := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		listed[f.Path] = true
	}
	for _, n := range names {
		if !listed[n] {
			return nil, fmt.Errorf("%s differs from its manifest: the archive holds it, the manifest does not list it", n)
		}
	}
	return m, nil
}

// unpackCheckpoint unpacks every entry but the manifest through
// UnpackTarRoot, passing the archive on through a pipe.
func unpackCheckpoint(r io.Reader, root *os.Root, reserved []string, opt UnpackOptions) (int, error) {
	src, done, err := decompressed(r)
	if err != nil {
		return 0, err
	}
	defer done()
	pr, pw := io.Pipe()
	go func() {
		tr, tw := tar.NewReader(src), tar.NewWriter(pw)
		err := func() error {
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					return tw.Close()
				}
				if err != nil {
					return err
				}
				if h.Name == domain.CheckpointManifestEntry {
					continue
				}
				if first, _, _ := strings.Cut(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), "/"); slices.Contains(reserved, first) {
					return fmt.Errorf("%s: %s is the node's, not the environment's", h.Name, first)
				}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if _, err := io.Copy(tw, tr); err != nil {
					return err
				}
			}
		}()
		pw.CloseWithError(err)
	}()
	n, err := UnpackTarRoot(pr, root, opt)
	pr.CloseWithError(errors.New("unpacking ended"))
	return n, err
}

// verifyCheckpoint holds what was restored to the manifest, in its order
// (a folder before what it holds), and gives every entry its mode: files
// and links first, then folders from the deepest, so that a folder without
// write or search permission does not stop the rest.
func verifyCheckpoint(root *os.Root, m *domain.CheckpointManifest) error {
	for _, f := range m.Files {
		if err := verifyEntry(root, f); err != nil {
			return fmt.Errorf("%s differs from its manifest: %w", f.Path, err)
		}
	}
	for i := len(m.Files) - 1; i >= 0; i-- {
		f := m.Files[i]
		if f.Type == domain.CheckpointTypeSymlink {
			continue
		}
		if err := root.Chmod(f.Path, fs.FileMode(f.Mode&0o777)); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	for _, f := range m.Files {
		if f.Type == domain.CheckpointTypeSymlink {
			continue
		}
		st, err := root.Lstat(f.Path)
		if err != nil {
			return fmt.Errorf("%s differs from its manifest: %w", f.Path, err)
		}
		if got := uint32(st.Mode().Perm()); got != f.Mode&0o777 {
			return fmt.Errorf("%s differs from its manifest: its mode is %04o, the manifest says %04o", f.Path, got, f.Mode&0o777)
		}
	}
	return nil
}

func verifyEntry(root *os.Root, f domain.CheckpointFile) error {
	if f.Path == "" || path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || strings.HasPrefix(f.Path, "../") {
		return errors.New("not a path inside")
	}
	st, err := root.Lstat(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("it is missing")
	}
	if err != nil {
		return err
	}
	switch f.Type {
	case domain.CheckpointTypeDir:
		if !st.IsDir() {
			return fmt.Errorf("it is not a folder (%s)", st.Mode().Type())
		}
	case domain.CheckpointTypeSymlink:
		if st.Mode()&fs.ModeSymlink == 0 {
			return fmt.Errorf("it is not a symbolic link (%s)", st.Mode().Type())
		}
		t, err := root.Readlink(f.Path)
		if err != nil {
			return err
		}
		if t != f.Target {
			return fmt.Errorf("it links to %q, the manifest says %q", t, f.Target)
		}
	case domain.CheckpointTypeFile:
		if !st.Mode().IsRegular() {
			return fmt.Errorf("it is not a regular file (%s)", st.Mode().Type())
		}
		if st.Size() != f.Size {
			return fmt.Errorf("it holds %d bytes, the manifest says %d", st.Size(), f.Size)
		}
		sum, err := fileSHA256(root, f.Path)
		if err != nil {
			return err
		}
		if !strings.EqualFold(sum, f.SHA256) {
			return fmt.Errorf("its SHA-256 is %s, the manifest says %s", sum, f.SHA256)
		}
	default:
		return fmt.Errorf("unknown type %q", f.Type)
	}
	return nil
}

func fileSHA256(root *os.Root, name string) (string, error) {
	fh, err := root.Open(name)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
