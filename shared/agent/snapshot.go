package agent

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// MaxUnpackBytes bounds what one snapshot may unpack to, so a small
// compressed archive cannot fill the node's disk.
const MaxUnpackBytes = 16 << 30

// restore downloads a snapshot through its signed link, checks its SHA-256,
// and unpacks it (tar, or gzip-compressed tar) into root. Only regular
// files, folders and symbolic links that stay inside root are unpacked;
// anything else in the archive fails the restore rather than being skipped
// silently.
func (a *Agent) restore(ctx context.Context, s *nodes.Snapshot, root string) (*domain.Restored, error) {
	tmp, err := os.CreateTemp(a.cfg.WorkDir, "snapshot-*.download")
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("snapshot link: %w", err)
	}
	res, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download snapshot %s: %w", s.ID, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download snapshot %s: HTTP %d", s.ID, res.StatusCode)
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, sum), res.Body)
	if err != nil {
		return nil, fmt.Errorf("download snapshot %s: %w", s.ID, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); s.SHA256 != "" && got != s.SHA256 {
		return nil, fmt.Errorf("snapshot %s: downloaded %d bytes with SHA-256 %s, want %s", s.ID, n, got, s.SHA256)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	files, err := unpack(tmp, root)
	if err != nil {
		return nil, fmt.Errorf("unpack snapshot %s: %w", s.ID, err)
	}
	return &domain.Restored{Key: s.ID, Root: root, Files: files, Created: s.Created}, nil
}

// unpack extracts a tar or tar.gz stream into root and counts regular files.
func unpack(r io.Reader, root string) (int, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, err
		}
		defer zr.Close()
		src = zr
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return 0, err
	}
	tr := tar.NewReader(src)
	files := 0
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("not a tar archive (or a damaged one): %w", err)
		}
		dst, err := inside(root, h.Name)
		if err != nil {
			return files, err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return files, err
			}
		case tar.TypeReg:
			total += h.Size
			if total > MaxUnpackBytes {
				return files, fmt.Errorf("unpacks to more than %d bytes", int64(MaxUnpackBytes))
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return files, err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return files, err
			}
			_, err = io.CopyN(f, tr, h.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, err
			}
			files++
		case tar.TypeSymlink:
			target := h.Linkname
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(dst), target)
			}
			if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(h.Linkname) {
				return files, fmt.Errorf("%s: symbolic link to %q leaves the environment's folder", h.Name, h.Linkname)
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return files, err
			}
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return files, err
			}
		case tar.TypeXGlobalHeader:
		default:
			return files, fmt.Errorf("%s: entries of type %q are not unpacked (only files, folders and symbolic links)", h.Name, string(h.Typeflag))
		}
	}
}

// inside resolves an archive path under root, refusing absolute paths and ..
func inside(root, name string) (string, error) {
	if filepath.IsAbs(name) || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%s: absolute paths are not unpacked", name)
	}
	for _, part := range strings.Split(filepath.ToSlash(name), "/") {
		if part == ".." {
			return "", fmt.Errorf("%s: paths with .. are not unpacked", name)
		}
	}
	return filepath.Join(root, filepath.Clean("/"+name)), nil
}

// parseSize reads a size: plain bytes, or with K, M, G, T (powers of 1000)
// or Ki, Mi, Gi, Ti (powers of 1024), as Kubernetes writes them.
func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	mult := uint64(1)
	num := s
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("not a size such as 512Mi or 2G")
	}
	return n * mult, nil
}
