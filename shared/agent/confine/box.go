// Package confine holds what keeps an environment apart on a node, whatever
// runtime runs it: the user ids lent to environments (UIDPool), an
// environment's folder, user and cgroup (Box), its network namespace as the
// agent holds it (Net) and the egress proxy served in it (EgressProxy). The
// runtimes (package runtimes/process, runtimes/container) are given a Node,
// which the agent sets up once at start.
package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

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
	// Guard judges what egress proxies dial.
	Guard EgressGuard
	// Boundary, when set, opens the network boundary (package netstack,
	// which the agent wires in) of an environment of a template with
	// network open or rules in its network namespace h; id names the
	// environment on the node. Nil where the node cannot make one: such
	// templates then get the egress proxy (open) or do not start (rules).
	Boundary func(h netns.NsHandle, t domain.Template, id string) (Egress, error)
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
	once   sync.Once
}

// User is a user id lent to one environment, held (against other agents
// on the node too) until its folder is gone.
type User struct {
	UID     int
	release func()
}

// Owner is the box's user as the owner of its files, nil for the agent's own.
func (b *Box) Owner() *runtimes.Owner {
	if b == nil || b.User == nil {
		return nil
	}
	return &runtimes.Owner{UID: b.User.UID, GID: b.User.UID}
}

// NewBox creates an environment's folder, 0700 and owned by a user lent to
// it when the agent runs as root, and its cgroup where it can.
func (n *Node) NewBox(root string) (*Box, error) {
	b := &Box{Root: root}
	if n.Users != nil {
		u, err := n.Users.Take()
		if err != nil {
			return nil, err
		}
		b.User = u
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		n.releaseBox(b)
		return nil, fmt.Errorf("create the environment's folder: %w", err)
	}
	if b.User != nil {
		// envs/ is the agent's and only it creates there, so the folder just
		// made is the one handed over.
		if err := os.Lchown(root, b.User.UID, b.User.UID); err != nil {
			n.Cleanup(b)
			return nil, fmt.Errorf("give the environment's folder to its user: %w", err)
		}
	}
	if n.Cgroups != "" {
		dir := filepath.Join(n.Cgroups, "envlease-"+filepath.Base(root))
		if err := os.Mkdir(dir, 0o755); err != nil {
			n.Log.Warn("no cgroup for the environment; a stop kills its processes by user or process group instead", "root", root, "err", err)
		} else {
			b.Cgroup = dir
		}
	}
	return b, nil
}

// Cleanup removes an environment's folder (unless KeepRoots) and its
// cgroup, and gives its user id back. Its processes are gone by then.
func (n *Node) Cleanup(b *Box) {
	if b == nil {
		return
	}
	b.once.Do(func() {
		if !n.KeepRoots {
			_ = os.RemoveAll(b.Root)
		}
		n.releaseBox(b)
	})
}

func (n *Node) releaseBox(b *Box) {
	if b.Cgroup != "" {
		if err := removeCgroup(b.Cgroup); err != nil {
			n.Log.Warn("cgroup not removed", "cgroup", b.Cgroup, "err", err)
		}
	}
	if b.User != nil {
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
// that name is replaced, and it is never followed out of the folder.
func (b *Box) OpenLog() (*os.File, error) {
	root, err := os.OpenRoot(b.Root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	const name = ".envlease.log"
	if st, err := root.Lstat(name); err == nil && !st.Mode().IsRegular() {
		if err := root.RemoveAll(name); err != nil {
			return nil, err
		}
	}
	f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if o := b.Owner(); o != nil {
		if err := f.Chown(o.UID, o.GID); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
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
