package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/agent/checkpoint"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// restore downloads a snapshot (fetch), and unpacks it (a tar, plain, gzip-
// or zstd-compressed) into the environment's folder under archive.UnpackTarRoot's
// policy, everything owned by the environment's user, counted against the
// environment's budget. A refused entry fails the restore rather than being
// skipped silently.
//
// The files go to the environment's home (runtimes.Files): a process's
// folder, a container's work folder in its root filesystem.
func (a *Agent) restore(ctx context.Context, s *nodes.Snapshot, fs runtimes.Files, budget *archive.Budget) (*domain.Restored, error) {
	if s.ContentType == domain.CheckpointContentType {
		return a.restoreCheckpoint(ctx, s, fs, budget)
	}
	dir, err := runtimes.WorkdirIn(fs.Root, fs.Home)
	if err != nil {
		return nil, err
	}
	f, err := a.fetch(ctx, s, "snapshot "+s.ID)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files, err := unpack(f, dir, archive.UnpackOptions{Owner: ownerOf(fs), Budget: budget, Packed: s.Size})
	if err != nil {
		return nil, fmt.Errorf("unpack snapshot %s: %w", s.ID, err)
	}
	return &domain.Restored{Key: s.ID, Root: dir, Files: files, Created: s.Created}, nil
}

// restoreCheckpoint restores a checkpoint artifact into the environment's
// root (package checkpoint), within the environment's budget.
func (a *Agent) restoreCheckpoint(ctx context.Context, s *nodes.Snapshot, fs runtimes.Files, budget *archive.Budget) (*domain.Restored, error) {
	f, err := a.fetch(ctx, s, "checkpoint "+s.ID)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files, err := checkpoint.Restore(f, s.Size, fs, ownerOf(fs), budget)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", s.ID, err)
	}
	return &domain.Restored{Key: s.ID, Root: fs.Root, Files: files, Created: s.Created}, nil
}

// ownerOf is who owns what is unpacked into an environment's files.
func ownerOf(fs runtimes.Files) *archive.Owner {
	if fs.Owner == nil {
		return nil
	}
	return &archive.Owner{UID: fs.Owner.UID, GID: fs.Owner.GID}
}

// budget is a new environment's archive budget: the configured limits, and
// the node's floors of free disk and inodes asked as it unpacks.
func (a *Agent) budget() *archive.Budget {
	b := archive.NewBudget(a.cfg.Archives)
	b.Room = a.noRoom
	return b
}

// fetch downloads an artifact a claim links to (what names it in errors)
// into a file of the work dir, and checks its size and SHA-256 before
// anything of it is used. The file is already unlinked: closing it frees it.
// A download that would take the node below its floor of free disk is not
// started.
func (a *Agent) fetch(ctx context.Context, s *nodes.Snapshot, what string) (*os.File, error) {
	if err := a.roomFor(uint64(max(s.Size, 0))); err != nil {
		return nil, fmt.Errorf("download %s (%s): %w", what, archive.SizeText(s.Size), err)
	}
	tmp, err := os.CreateTemp(a.cfg.WorkDir, "download-*")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	_ = os.Remove(tmp.Name())
	f, err := a.download(ctx, s, what, tmp)
	if err != nil {
		tmp.Close()
	}
	return f, err
}

func (a *Agent) download(ctx context.Context, s *nodes.Snapshot, what string, tmp *os.File) (*os.File, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: link: %w", what, err)
	}
	res, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", what, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download %s: HTTP %d", what, res.StatusCode)
	}
	sum := sha256.New()
	// One byte past the declared size is enough to tell a wrong download,
	// and a wrong one must not fill the node's disk.
	n, err := io.Copy(io.MultiWriter(tmp, sum), io.LimitReader(res.Body, s.Size+1))
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", what, err)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if n != s.Size || (s.SHA256 != "" && !strings.EqualFold(got, s.SHA256)) {
		return nil, fmt.Errorf("%s: downloaded %d bytes with SHA-256 %s, want %d bytes with %s", what, n, got, s.Size, s.SHA256)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return tmp, nil
}

// unpack extracts a tar stream (plain or compressed) into root (created if
// missing) and counts regular files.
func unpack(r io.Reader, root string, opt archive.UnpackOptions) (int, error) {
	src, done, err := archive.Decompressed(r)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return 0, err
	}
	return archive.UnpackTar(src, root, opt)
}
