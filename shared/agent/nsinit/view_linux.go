//go:build linux

package nsinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// View makes an environment look, from inside, like its template, as a
// container does: its user has a name, and it works at the template's
// workdir rather than in a folder of the node. The init sets it up in the
// environment's mount namespace, so the node and other environments see
// nothing of it, and every command entered later (Enter) sees it too.
type View struct {
	// User and Group name the command's UID and GID: /etc/passwd and
	// /etc/group, as the environment sees them, are the node's with an
	// entry for each added (when the node has none for that id), the user's
	// home folder Home and shell /bin/sh.
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
	Home  string `json:"home,omitempty"`
	// Workdir is the template's workdir, an absolute path: the command's
	// folder (Config.Dir, inside the environment's folder on the node) is
	// bound there, and the command and every command entered start there.
	Workdir string `json:"workdir,omitempty"`
}

// viewStage is where the init writes the environment's passwd and group,
// on a tmpfs of its mount namespace that it detaches again once they are
// bound over the node's: a folder of the agent's, so nothing of the node's
// is hidden meanwhile.
const viewStage = "/run/envlease"

// applyView sets up cfg.View in the init's mount namespace. What cannot be
// set up is a warning: the environment runs as it would without.
func applyView(cfg Config) []string {
	v := cfg.View
	if v == nil {
		return nil
	}
	var warns []string
	if v.User != "" && cfg.UID >= 0 {
		if err := nameUser(v, cfg.UID, cfg.GID); err != nil {
			warns = append(warns, fmt.Sprintf("the environment's user has no name: %v", err))
		}
	}
	if v.Workdir != "" && cfg.Dir != "" {
		if err := bindWorkdir(cfg.Dir, v.Workdir); err != nil {
			warns = append(warns, fmt.Sprintf("the workdir is %s, not %s: %v", cfg.Dir, v.Workdir, err))
		}
	}
	return warns
}

// nameUser binds a passwd and a group file with the environment's user and
// group over the node's.
func nameUser(v *View, uid, gid int) error {
	group := v.Group
	if group == "" {
		group = v.User
	}
	files := []struct {
		path  string
		id    int
		entry string
	}{
		{"/etc/passwd", uid, fmt.Sprintf("%s:x:%d:%d:envlease environment:%s:/bin/sh", v.User, uid, gid, v.Home)},
		{"/etc/group", gid, fmt.Sprintf("%s:x:%d:", group, gid)},
	}
	if err := os.MkdirAll(viewStage, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("envlease-view", viewStage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mount a tmpfs at %s: %w", viewStage, err)
	}
	// The bound files keep the tmpfs alive; the folder is the node's again.
	defer unix.Unmount(viewStage, unix.MNT_DETACH) //nolint:errcheck
	for _, f := range files {
		node, err := os.ReadFile(f.path)
		if err != nil {
			return err
		}
		if hasID(node, f.id) {
			continue
		}
		if len(node) > 0 && !bytes.HasSuffix(node, []byte("\n")) {
			node = append(node, '\n')
		}
		staged := filepath.Join(viewStage, filepath.Base(f.path))
		if err := os.WriteFile(staged, append(node, f.entry+"\n"...), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(staged, f.path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind over %s: %w", f.path, err)
		}
		// Read-only: it is root's file all the same, but no one need write it.
		_ = unix.Mount("", f.path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
	}
	return nil
}

// hasID says whether a passwd or group file has an entry for id (its third
// field), so that a name the node gives it stays.
func hasID(file []byte, id int) bool {
	want := strconv.Itoa(id)
	for _, line := range strings.Split(string(file), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 2 && f[2] == want {
			return true
		}
	}
	return false
}

// bindWorkdir binds dir at target, the template's workdir. target must be
// an empty folder of the node, or a path under a top-level folder the node
// does not have (/workspace, /app), which is made as an empty mount point
// and left: the node's own folders are never covered or added to.
func bindWorkdir(dir, target string) error {
	target = filepath.Clean(target)
	if !filepath.IsAbs(target) || target == "/" {
		return errors.New("not an absolute path below /")
	}
	if within(dir, target) || within(target, dir) {
		return errors.New("it and the environment's folder hold one another")
	}
	top := "/" + strings.Split(strings.TrimPrefix(target, "/"), "/")[0]
	if _, err := os.Lstat(top); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(target)
	if err != nil {
		return fmt.Errorf("the node has no empty folder there: %w", err)
	}
	if len(entries) > 0 {
		return errors.New("it is a folder of the node with files in it")
	}
	if err := unix.Mount(dir, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the folder there: %w", err)
	}
	return nil
}

// within says whether p is dir or below it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// workingDir is the folder a command starts in: the template's workdir
// when the init bound the command's folder there (the same folder, at the
// template's path), else the folder itself.
func workingDir(cfg Config) string {
	if cfg.View == nil || cfg.View.Workdir == "" || cfg.Dir == "" {
		return cfg.Dir
	}
	a, err := os.Stat(cfg.View.Workdir)
	if err != nil {
		return cfg.Dir
	}
	b, err := os.Stat(cfg.Dir)
	if err != nil || !os.SameFile(a, b) {
		return cfg.Dir
	}
	return cfg.View.Workdir
}
