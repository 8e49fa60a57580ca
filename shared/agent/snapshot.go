package agent

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// restore downloads a snapshot through its signed link, checks its SHA-256,
// and unpacks it (tar, or gzip-compressed tar) into the environment's folder
// under UnpackTarRoot's policy, everything owned by the environment's user.
// A refused entry fails the restore rather than being skipped silently.
func (a *Agent) restore(ctx context.Context, s *nodes.Snapshot, b *box) (*domain.Restored, error) {
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
	files, err := unpack(tmp, b.root, b.owner())
	if err != nil {
		return nil, fmt.Errorf("unpack snapshot %s: %w", s.ID, err)
	}
	return &domain.Restored{Key: s.ID, Root: b.root, Files: files, Created: s.Created}, nil
}

// unpack extracts a tar or tar.gz stream into root (created if missing) and
// counts regular files.
func unpack(r io.Reader, root string, owner *Owner) (int, error) {
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
	if err := os.MkdirAll(root, 0o700); err != nil {
		return 0, err
	}
	return UnpackTar(src, root, UnpackOptions{Owner: owner})
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
