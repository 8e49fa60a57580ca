package agent

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/nodes"
)

// unpackShares puts the files of every share that carries them at the
// share's path in the box, before the command starts, so the command never
// sees a half-filled folder. The first refused archive fails the
// environment, naming the share, the entry and why; so does the archive
// that passes the environment's budget (archive.Limits), which counts the
// snapshot and every share's archive together.
func (a *Agent) unpackShares(ctx context.Context, shares []nodes.ClaimedShare, fs runtimes.Files, budget *archive.Budget) error {
	for _, sh := range shares {
		if err := a.unpackShare(ctx, sh, fs, budget); err != nil {
			return err
		}
	}
	return nil
}

// unpackShare fetches one share's archive (size and SHA-256 checked) and
// unpacks it under archive.UnpackTarRoot's policy, everything owned by the
// environment's user. The share's path is placed in the folder as the
// workdir is (workdirIn: /workspace/src -> <root>/workspace/src), and it is
// opened through the environment's Root, so a link a snapshot or an earlier
// share left on the way cannot lead the files elsewhere. A relative path is
// taken from the environment's home (runtimes.Files).
func (a *Agent) unpackShare(ctx context.Context, sh nodes.ClaimedShare, fs runtimes.Files, budget *archive.Budget) error {
	what := fmt.Sprintf("share %q (artifact %s)", sh.Name, sh.Archive.ID)
	p := sh.EnvPath
	if !path.IsAbs(p) {
		p = path.Join("/", fs.Home, p)
	}
	dir, err := runtimes.WorkdirIn(fs.Root, p)
	if err != nil {
		return fmt.Errorf("%s: path: %w", what, err)
	}
	rel, err := filepath.Rel(fs.Root, dir)
	if err != nil {
		return fmt.Errorf("%s: path: %w", what, err)
	}
	rel = filepath.ToSlash(rel)
	f, err := a.fetch(ctx, &sh.Archive, what)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(fs.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	owner := ownerOf(fs)
	if err := archive.MkdirAll(root, rel, owner); err != nil {
		return fmt.Errorf("unpack %s at %s: %w", what, sh.EnvPath, archive.Plain(err))
	}
	into, err := root.OpenRoot(rel)
	if err != nil {
		return fmt.Errorf("unpack %s at %s: %w", what, sh.EnvPath, archive.Plain(err))
	}
	defer into.Close()
	src, done, err := archive.Decompressed(f)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", what, err)
	}
	defer done()
	files, err := archive.UnpackTarRoot(src, into, archive.UnpackOptions{Owner: owner, Budget: budget, Packed: sh.Archive.Size})
	if err != nil {
		return fmt.Errorf("unpack %s at %s: %w", what, sh.EnvPath, err)
	}
	a.log.Debug("share unpacked", "share", sh.Name, "artifact", sh.Archive.ID, "files", files, "dir", dir)
	return nil
}
