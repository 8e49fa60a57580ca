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
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/domain"
)

// Pack writes the files under dir to w as a tar, zstd-compressed,
// and describes every one in m.Files; the manifest itself is the archive's
// last entry (domain.CheckpointManifestEntry). Each regular file is read
// once: its manifest digest is of the very bytes packed, so the archive
// agrees with its manifest even if the file were written meanwhile (the
// caller freezes the environment so that it is not).
//
// Folders, regular files (a hard link is packed as a file of its own) and
// symbolic links that stay inside are packed; anything else (a socket, a
// fifo, a device file, an overlay's whiteout) and a link that is absolute
// or leads out is listed in m.Skipped, as the unpacker would refuse it.
// Every read goes through an os.Root of dir, so the environment cannot lead
// the packing out of its files with a link.
func Pack(dir string, w io.Writer, m *domain.CheckpointManifest, reserved []string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if name == "." {
			return nil
		}
		if slices.Contains(reserved, name) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		return packEntry(root, tw, name, d, m)
	})
	if err == nil {
		err = writeManifest(tw, m)
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return err
}

func packEntry(root *os.Root, tw *tar.Writer, name string, d fs.DirEntry, m *domain.CheckpointManifest) error {
	info, err := root.Lstat(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	perm := uint32(info.Mode().Perm())
	hdr := &tar.Header{Name: name, Mode: int64(perm), ModTime: info.ModTime(), Format: tar.FormatPAX}
	entry := domain.CheckpointFile{Path: name, Mode: perm}
	switch {
	case info.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		entry.Type = domain.CheckpointTypeDir
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := root.Readlink(name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if !linkStaysInside(name, target) {
			m.Skipped = append(m.Skipped, name)
			return nil
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		entry.Type, entry.Target = domain.CheckpointTypeSymlink, target
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	case info.Mode().IsRegular():
		sum, err := packFile(root, tw, name, hdr, info.Size())
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		entry.Type, entry.Size, entry.SHA256 = domain.CheckpointTypeFile, info.Size(), sum
	default:
		m.Skipped = append(m.Skipped, name)
		return nil
	}
	m.Files = append(m.Files, entry)
	return nil
}

// packFile packs one regular file of the size Lstat saw, hashing what it
// packs: a file that changed size while packed is an error, not a torn copy.
func packFile(root *os.Root, tw *tar.Writer, name string, hdr *tar.Header, size int64) (string, error) {
	f, err := root.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() != size {
		return "", errors.New("it changed while it was packed")
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, size
	if err := tw.WriteHeader(hdr); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(tw, h), f, size); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("it shrank while it was packed")
		}
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// linkStaysInside says whether the unpacker would restore a link of that
// target at name: relative, and not leading out when read as text.
func linkStaysInside(name, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") {
		return false
	}
	t := path.Join(path.Dir(name), target)
	return t != ".." && !strings.HasPrefix(t, "../")
}

func writeManifest(tw *tar.Writer, m *domain.CheckpointManifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: domain.CheckpointManifestEntry, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = tw.Write(b)
	return err
}
