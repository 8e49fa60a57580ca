// Package confine holds what keeps an environment apart on a node, whatever
// runtime runs it: the user ids lent to environments (UIDPool), an
// environment's folder, user and cgroup (Box), its network namespace as the
// agent holds it (Net) and the egress proxy served in it (EgressProxy). The
// runtimes (package runtimes/process, runtimes/container) are given a Node,
// which the agent sets up once at start.
package confine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/envlease/envlease/shared/agent/capped"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/vishvananda/netns"
)

// Egress is what carries an environment's traffic out, the proxy or the
// network boundary, held by its Net until the environment ends.
type Egress interface{ Close() }

// Node is how the node confines environments, as the agent found at start.
type Node struct {
	// Users lends each environment a user of its own; nil when the agent
	// is not root. Cgroups is the folder environments' cgroups are made
	// in, "" when the node has none the agent may write.
	Users   *UIDPool
	Cgroups string
	// Namespaces says environments run in network, PID and mount
	// namespaces of their own (root only).
	Namespaces bool
	// Disks gives each environment a filesystem of its own, bounded; nil
	// when the agent is not root (nothing bounds what it writes then).
	Disks *Disks
	// Guard judges what egress proxies dial.
	Guard EgressGuard
	// Boundary, when set, opens the network boundary (package netstack,
	// which the agent wires in) of an environment of a template with
	// network open or rules in its network namespace h; id names the
	// environment on the node. Nil where the node cannot make one: such
	// templates then get the egress proxy (open) or do not start (rules).
	Boundary func(h netns.NsHandle, t domain.Template, id string) (Egress, error)
	// Prepared, when set, holds boxes made ahead of claims (TakeBox).
	Prepared *PreparedBoxes
	// KeepRoots leaves an environment's folder after it ends, for debugging.
	KeepRoots bool
	Log       *slog.Logger
}

// Proxied says whether t's environments reach out through the egress
// proxy: network egress, and network open where the node cannot make a
// boundary; only where environments have a network namespace of their own.
func (n *Node) Proxied(t domain.Template) bool {
	return n.Namespaces && (t.Egress() || t.Network == domain.NetworkOpen && n.Boundary == nil)
}

// OpenBoundary opens the network boundary of an environment of t (network
// open or rules) in its namespace h; an error where the node cannot.
func (n *Node) OpenBoundary(h netns.NsHandle, t domain.Template, id string) (Egress, error) {
	if n.Boundary == nil {
		return nil, fmt.Errorf("this node cannot enforce network %q (it makes no network boundaries: see the agent's log at start)", t.Network)
	}
	e, err := n.Boundary(h, t, id)
	if err != nil {
		return nil, fmt.Errorf("open the environment's network boundary: %w", err)
	}
	return e, nil
}

// Box is what holds one environment on the node: its folder (the root)
// and, when the agent runs as root, a user of its own; where the node has a
// writable cgroup v2 tree, a cgroup of its own.
type Box struct {
	Root   string
	User   *User  // nil: the agent's own user
	Cgroup string // the cgroup's folder, "" for none
	// Disk is the filesystem mounted at Root, nil without (Node.Disks).
	Disk *Disk
	once sync.Once
	// ended: EndAll found no process of the environment left, in its
	// cgroup or of its user.
	ended atomic.Bool
}

// User is a user id lent to one environment, held (against other agents
// on the node too) until its folder is gone.
type User struct {
	UID     int
	release func()
	// ended: every process of the id ended, and none can start again (the
	// environment's cgroup, which all of them run in, was emptied and is
	// removed): the pool may lend it again without looking (UIDPool).
	ended atomic.Bool
}

// Owner is the box's user as the owner of its files, nil for the agent's own.
func (b *Box) Owner() *runtimes.Owner {
	if b == nil || b.User == nil {
		return nil
	}
	return &runtimes.Owner{UID: b.User.UID, GID: b.User.UID}
}

// NewBox creates an environment's folder, 0700 and owned by a user lent to
// it when the agent runs as root, and its cgroup where it can. With
// Node.Disks the folder is the mount point of a disk of its own of size.
func (n *Node) NewBox(ctx context.Context, root string, size DiskSize) (*Box, error) {
	b, err := n.makeBox(ctx, root, size)
	if err != nil {
		return nil, err
	}
	n.addCgroup(b)
	return b, nil
}

// makeBox is NewBox without the cgroup: what PreparedBoxes makes ahead.
func (n *Node) makeBox(ctx context.Context, root string, size DiskSize) (*Box, error) {
	b := &Box{Root: root}
	if n.Users != nil {
		u, err := n.Users.Take()
		if err != nil {
			return nil, err
		}
		b.User = u
		// What an earlier holder of the id left in the node's shared
		// folders is not this environment's to read.
		if k := RemoveLeftovers(u.UID); k > 0 {
			n.Log.Info("removed what an earlier environment of the user id left in the node's shared folders", "uid", u.UID, "entries", k)
		}
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		n.releaseBox(b)
		return nil, fmt.Errorf("create the environment's folder: %w", err)
	}
	if n.Disks != nil {
		var owner *[2]int
		if b.User != nil {
			owner = &[2]int{b.User.UID, b.User.UID}
		}
		d, err := n.Disks.Make(ctx, filepath.Base(root), root, size, owner)
		if err != nil {
			n.Cleanup(b)
			return nil, err
		}
		b.Disk = d
		if err := os.Chmod(root, 0o700); err != nil {
			n.Cleanup(b)
			return nil, err
		}
	}
	if n.Namespaces {
		// Its /tmp and /var/tmp (TmpMounts), on its disk.
		if err := b.makeTmp(); err != nil {
			n.Cleanup(b)
			return nil, fmt.Errorf("create the environment's /tmp: %w", err)
		}
	}
	if b.User != nil {
		// envs/ is the agent's and only it creates there, so the folder just
		// made is the one handed over.
		if err := os.Lchown(root, b.User.UID, b.User.UID); err != nil {
			n.Cleanup(b)
			return nil, fmt.Errorf("give the environment's folder to its user: %w", err)
		}
	}
	return b, nil
}

// addCgroup gives the box its cgroup, envlease-<folder>, where the node
// has a tree for them: made with the folder's final name, which a restarted
// agent finds it by (ReclaimBoxes). Without one, a stop ends its processes
// by its user.
func (n *Node) addCgroup(b *Box) {
	if n.Cgroups == "" {
		return
	}
	dir := filepath.Join(n.Cgroups, "envlease-"+filepath.Base(b.Root))
	if err := os.Mkdir(dir, 0o755); err != nil {
		n.Log.Warn("no cgroup for the environment; a stop kills its processes by user or process group instead", "root", b.Root, "err", err)
	} else {
		b.Cgroup = dir
	}
}

// Cleanup removes an environment's folder (unless KeepRoots) and its
// cgroup, and gives its user id back. Its processes are gone by then.
func (n *Node) Cleanup(b *Box) {
	if b == nil {
		return
	}
	b.once.Do(func() {
		if !n.KeepRoots {
			// The disk goes first, whatever it holds, at once; the folder
			// is then empty.
			if err := b.Disk.Remove(); err != nil {
				n.Log.Warn("the environment's disk is not fully removed; the agent's next start removes the rest", "root", b.Root, "err", err)
			}
			_ = os.RemoveAll(b.Root)
		}
		if b.User != nil {
			RemoveLeftovers(b.User.UID)
		}
		n.releaseBox(b)
	})
}

func (n *Node) releaseBox(b *Box) {
	gone := false
	if b.Cgroup != "" {
		if err := removeCgroup(b.Cgroup); err != nil {
			n.Log.Warn("cgroup not removed", "cgroup", b.Cgroup, "err", err)
		} else {
			gone = true
		}
	}
	if b.User != nil {
		// Clean only if the end found no process of the id left and its
		// cgroup is gone: a process started into the cgroup after the end
		// (an exec racing the stop) kept it from being removed.
		b.User.ended.Store(gone && b.ended.Load())
		b.User.release()
	}
}

// MkdirIn creates the folder rel inside the box's root, through os.Root (a
// link in the folder, from a snapshot, cannot lead the agent elsewhere), each
// created folder owned by the environment's user.
func (b *Box) MkdirIn(rel string) error {
	root, err := os.OpenRoot(b.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	return mkdirAll(root, rel, b.Owner())
}

// OpenLog opens the environment's log, <root>/.envlease.log, for appending:
// one a snapshot brought is kept if it is a regular file, anything else of
// that name is replaced, and it is never followed out of the folder. It
// holds the last max bytes of output (capped.DefaultMax when 0), in it and
// .envlease.log.1.
func (b *Box) OpenLog(max int64) (io.WriteCloser, error) {
	root, err := os.OpenRoot(b.Root)
	if err != nil {
		return nil, err
	}
	var chown func(*os.File) error
	if o := b.Owner(); o != nil {
		chown = func(f *os.File) error { return f.Chown(o.UID, o.GID) }
	}
	f, err := capped.New(max, capped.OpenIn(root, LogName, chown))
	if err != nil {
		root.Close()
		return nil, err
	}
	return &logFile{File: f, root: root}, nil
}

// LogName is the environment's log at the top of its folder.
const LogName = ".envlease.log"

// logFile is the log with the folder it is opened in.
type logFile struct {
	*capped.File
	root *os.Root
}

func (l *logFile) Close() error {
	err := l.File.Close()
	l.root.Close()
	return err
}

// ErrNoCgroup says the node has no cgroup tree for environments.
var ErrNoCgroup = errors.New("no cgroup v2 tree the agent may write")

// UID is the user the box's processes run as: its own, or the agent's.
func (b *Box) UID() int {
	if b != nil && b.User != nil {
		return b.User.UID
	}
	return os.Geteuid()
}

// mkdirAll creates the folder rel (slash-separated) and those on the way
// inside root, each one it creates owned by owner; an existing name on the
// way must be a folder (os.Root does not follow a link out of root).
func mkdirAll(root *os.Root, rel string, owner *runtimes.Owner) error {
	if rel == "." || rel == "" {
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := root.Mkdir(p, 0o755)
		if err == nil {
			if owner != nil {
				if err := root.Lchown(p, owner.UID, owner.GID); err != nil {
					return err
				}
			}
			continue
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		st, err := root.Stat(p)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is in the way: it is not a folder", p)
		}
	}
	return nil
}

// TmpName is the folder at the top of a box's root that is its /tmp and
// /var/tmp in namespaces of its own, on its disk: its writes there count
// against resources.disk.
const TmpName = ".tmp"

// makeTmp makes the box's TmpName folder, its user's and open to all
// (1777), as /tmp is.
func (b *Box) makeTmp() error {
	root, err := os.OpenRoot(b.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Mkdir(TmpName, 0o700); err != nil {
		return err
	}
	if err := root.Chmod(TmpName, fs.ModeSticky|0o777); err != nil {
		return err
	}
	if o := b.Owner(); o != nil {
		return root.Lchown(TmpName, o.UID, o.GID)
	}
	return nil
}
