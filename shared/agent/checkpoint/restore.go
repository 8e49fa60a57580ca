package checkpoint

import (
	"archive/tar"
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

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// maxManifestBytes bounds a checkpoint's manifest (about 200 bytes a file).
const maxManifestBytes = 64 << 20

// Restore restores a checkpoint archive, as downloaded (packed bytes, for the
// ratio limit), into the root of fsys (a process's folder, a container's root
// filesystem: where it was taken), in three passes:
//
//  1. ReadManifest reads the archive once for its manifest (its last entry)
//     and checks that every other entry is one the manifest lists; the pass
//     is held to the limits of budget, counted apart, so that a crafted
//     archive of long or many names is refused at its first name past a
//     limit, before the names are kept;
//  2. its entries are unpacked through the confined unpacker, within the
//     environment's budget, everything given to owner;
//  3. every file the manifest lists is verified (type, size, SHA-256, link
//     target) and given the manifest's mode.
//
// The first path that differs fails the restore, and so the environment:
// never a silent partial restore. It says how many files were restored.
func Restore(f io.ReadSeeker, packed int64, fsys runtimes.Files, owner *archive.Owner, budget *archive.Budget) (int, error) {
	if budget == nil {
		budget = archive.NewBudget(archive.Limits{})
	}
	m, err := ReadManifest(f, archive.NewBudget(budget.Limits()), packed)
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(fsys.Root)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	files, err := Unpack(f, root, fsys.Reserved, archive.UnpackOptions{Owner: owner, Budget: budget, Packed: packed})
	if err != nil {
		return 0, fmt.Errorf("unpack: %w", err)
	}
	if err := Verify(root, m); err != nil {
		return 0, err
	}
	return files, nil
}

// ReadManifest reads the archive once: the manifest (its last entry), and
// that every other entry is one the manifest lists. Every header is held to
// budget (a budget of this pass alone) as it is read, so the names it keeps
// to compare with the manifest are at most the budget's MaxNamesBytes, and
// the manifest's own paths and targets are held to the same limits.
func ReadManifest(r io.Reader, budget *archive.Budget, packed int64) (*domain.CheckpointManifest, error) {
	if budget == nil {
		budget = archive.NewBudget(archive.Limits{})
	}
	src, done, err := archive.Decompressed(r)
	if err != nil {
		return nil, err
	}
	defer done()
	tr := archive.NewReader(src, budget, packed)
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
			return nil, fmt.Errorf("%s follows its manifest", budget.Quote(h.Name))
		}
		if h.Name == domain.CheckpointManifestEntry {
			if m, err = readManifest(tr, budget); err != nil {
				return nil, err
			}
			continue
		}
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/"))
	}
	if m == nil {
		return nil, errors.New("it has no manifest: not a checkpoint")
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

// readManifest reads and checks the manifest entry: its size, its version,
// and that it lists no more files, and no longer paths or targets, than
// the archive's limits let the archive hold.
func readManifest(r io.Reader, budget *archive.Budget) (*domain.CheckpointManifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxManifestBytes {
		return nil, errors.New("its manifest is too large")
	}
	m := &domain.CheckpointManifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("its manifest does not read: %w", err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("its manifest is of version %d; this node reads version %d", m.Version, Version)
	}
	l := budget.Limits()
	if l.MaxEntries > 0 && int64(len(m.Files)) > l.MaxEntries {
		return nil, fmt.Errorf("its manifest lists %d entries, more than an archive may hold (%d)", len(m.Files), l.MaxEntries)
	}
	for _, f := range m.Files {
		if l.MaxNameBytes > 0 && (int64(len(f.Path)) > l.MaxNameBytes || int64(len(f.Target)) > l.MaxNameBytes) {
			return nil, fmt.Errorf("its manifest lists %s with a path or target longer than %d bytes", budget.Quote(f.Path), l.MaxNameBytes)
		}
	}
	return m, nil
}

// Unpack unpacks every entry but the manifest through
// archive.UnpackTarRoot, passing the archive on through a pipe; a name
// reserved for the node (a container's init folder) is refused.
func Unpack(r io.Reader, root *os.Root, reserved []string, opt archive.UnpackOptions) (int, error) {
	src, done, err := archive.Decompressed(r)
	if err != nil {
		return 0, err
	}
	defer done()
	budget := opt.Budget
	if budget == nil {
		budget = archive.NewBudget(archive.Limits{})
		opt.Budget = budget
	}
	pr, pw := io.Pipe()
	go func() {
		// Names only: the entries are counted once, by UnpackTarRoot.
		tr, tw := archive.NewNameReader(src, archive.NewBudget(budget.Limits())), tar.NewWriter(pw)
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
					return fmt.Errorf("%s: %s is the node's, not the environment's", budget.Quote(h.Name), first)
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
	n, err := archive.UnpackTarRoot(pr, root, opt)
	pr.CloseWithError(errors.New("unpacking ended"))
	return n, err
}

// Verify holds what was restored to the manifest, in its order
// (a folder before what it holds), and gives every entry its mode: files
// and links first, then folders from the deepest, so that a folder without
// write or search permission does not stop the rest.
func Verify(root *os.Root, m *domain.CheckpointManifest) error {
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
