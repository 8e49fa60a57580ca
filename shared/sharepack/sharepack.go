// Package sharepack packs a local folder into the archive a share's files
// travel in: a tar of paths relative to the folder, zstd-compressed, which
// the node agent unpacks at the share's path (archive.UnpackTarRoot). It keeps
// to what the agent's unpacker accepts, so a packed folder is never refused
// there: regular files, folders, and symbolic links whose relative target
// stays inside the folder. Everything else is left out and said so.
package sharepack

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/domain"
)

// ContentType is the media type of a packed share.
const ContentType = "application/zstd"

// Entry is one thing of the folder that goes into the archive.
type Entry struct {
	// Path is relative to the folder, slash-separated.
	Path string
	// Type is fs.ModeDir, fs.ModeSymlink or 0 (a regular file).
	Type fs.FileMode
	// Link is a symbolic link's target.
	Link string
}

// Skipped is something of the folder left out of the archive, and why.
type Skipped struct {
	Path string
	Why  string
}

// Listing is what of a folder goes into its archive, in archive order:
// the walk's lexical order, a folder before what it holds, so the same tree
// always packs to the same bytes.
type Listing struct {
	Dir     string
	Entries []Entry
	Skipped []Skipped
	// Files counts regular files and symbolic links; Bytes the regular
	// files' sizes when listed.
	Files int
	Bytes int64
}

// List walks dir without following symbolic links and lists what goes into
// its archive. A path matching one of exclude (domain.Excluded, the rule the
// service filters share file names with) is left out silently, a folder with
// everything in it; what the agent would refuse is left out and reported in
// Skipped.
func List(dir string, exclude []string) (Listing, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Listing{}, err
	}
	// WalkDir does not enter a root that is a link: walk where it leads.
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return Listing{}, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return Listing{}, err
	}
	if !st.IsDir() {
		return Listing{}, fmt.Errorf("%s is not a folder", dir)
	}
	l := Listing{Dir: abs}
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == abs {
			return nil
		}
		rel, err := filepath.Rel(abs, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if domain.Excluded(exclude, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch t := d.Type(); {
		case t.IsDir():
			l.Entries = append(l.Entries, Entry{Path: rel, Type: fs.ModeDir})
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			l.Entries = append(l.Entries, Entry{Path: rel})
			l.Files++
			l.Bytes += info.Size()
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if why := linkProblem(rel, target); why != "" {
				l.Skipped = append(l.Skipped, Skipped{Path: rel, Why: why})
				return nil
			}
			l.Entries = append(l.Entries, Entry{Path: rel, Type: fs.ModeSymlink, Link: target})
			l.Files++
		default:
			l.Skipped = append(l.Skipped, Skipped{Path: rel, Why: "not a regular file, folder or symbolic link"})
		}
		return nil
	})
	if err != nil {
		return Listing{}, err
	}
	return l, nil
}

// linkProblem says why the agent would refuse a symbolic link at name with
// target (archive.UnpackTarRoot's rule), or "".
func linkProblem(name, target string) string {
	if target == "" {
		return "a symbolic link to nothing"
	}
	if path.IsAbs(filepath.ToSlash(target)) || filepath.IsAbs(target) {
		return fmt.Sprintf("a symbolic link to the absolute path %q (only relative links that stay inside the folder are shared)", target)
	}
	if t := path.Join(path.Dir(name), filepath.ToSlash(target)); t == ".." || strings.HasPrefix(t, "../") {
		return fmt.Sprintf("a symbolic link to %q, which leads out of the folder", target)
	}
	return ""
}

// Names are the paths of the listing's files and symbolic links that the
// service takes as share file names (for display): relative, UTF-8 without
// control characters or backslashes, at most 1024 bytes.
func (l Listing) Names() []string {
	out := []string{}
	for _, e := range l.Entries {
		if e.Type != fs.ModeDir && displayable(e.Path) {
			out = append(out, e.Path)
		}
	}
	return out
}

func displayable(p string) bool {
	if len(p) > 1024 || !utf8.ValidString(p) || strings.Contains(p, "\\") {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// Progress is told how many bytes of the files have been packed, of total.
type Progress func(done, total int64)

// Write packs the listing into w: a tar of its entries, zstd-compressed. The
// headers carry the path, the type and the permission bits, and nothing of
// the packing user or of when the files were written (the agent does not
// restore times), so the same content packs to the same bytes on any
// machine. A file that changed size since it was listed is packed as it is
// now; one that shrinks while it is read fails the packing.
func Write(w io.Writer, l Listing, progress Progress) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	var done int64
	for _, e := range l.Entries {
		if err := writeEntry(tw, l.Dir, e, func(n int64) {
			done += n
			if progress != nil {
				progress(done, l.Bytes)
			}
		}); err != nil {
			zw.Close()
			return fmt.Errorf("pack %s: %w", e.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

func writeEntry(tw *tar.Writer, dir string, e Entry, read func(int64)) error {
	full := filepath.Join(dir, filepath.FromSlash(e.Path))
	h := &tar.Header{Name: e.Path, ModTime: epoch}
	switch e.Type {
	case fs.ModeDir:
		h.Typeflag, h.Name, h.Mode = tar.TypeDir, e.Path+"/", 0o755
		return tw.WriteHeader(h)
	case fs.ModeSymlink:
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		return tw.WriteHeader(h)
	}
	f, err := os.Open(full)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return errors.New("it is no longer a regular file")
	}
	h.Typeflag, h.Size, h.Mode = tar.TypeReg, info.Size(), int64(info.Mode().Perm())
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.TeeReader(io.LimitReader(f, info.Size()), countFunc(read)))
	if err == nil && n != info.Size() {
		err = fmt.Errorf("it shrank from %d to %d bytes while it was packed", info.Size(), n)
	}
	return err
}

// epoch is every entry's time.
var epoch = time.Unix(0, 0).UTC()

type countFunc func(int64)

func (c countFunc) Write(p []byte) (int, error) {
	c(int64(len(p)))
	return len(p), nil
}
