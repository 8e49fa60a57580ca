// Package runtimes is the seam between the agent and what runs an
// environment on a node: the agent's lifecycle (claims, warm pools, shares
// and snapshots, readiness, tunnels, reports) speaks only to a Runtime and
// the Handle it gives for each environment. "process" runs the template's
// command as a confined process of the node; "container" runs it in an OCI
// container under runc, from the template's image. See docs/nodes.md,
// "Runtimes".
package runtimes

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Runtime runs environments of the templates that name it.
type Runtime interface {
	// Name is the template runtime it serves (process, container).
	Name() string
	// Prepare makes what holds one environment (a folder of the node, a
	// container's root filesystem) without starting its command. The agent
	// then puts the snapshot's and the shares' files in (Handle.Files) and
	// starts it; on any failure it calls Handle.Remove.
	Prepare(ctx context.Context, e Env) (Handle, error)
	// Recover removes what an earlier run of the agent left of this
	// runtime's environments (processes, mounts, cgroups, namespaces,
	// folders) and says how many environments it found. It runs once, at
	// start, before any Prepare.
	Recover(ctx context.Context) (int, error)
}

// Env is one environment to prepare.
type Env struct {
	// ID names it on the node: the environment's id, or warm-<random> for
	// a warm one (which cannot know the environment it will serve).
	ID       string
	Template domain.Template
	// Org is the environment's organization, which a build cache
	// (Template.BuildCache) is kept for.
	Org string
	// ImageArtifact is set when the template's image is an artifact (an
	// OCI image archive) that the claim links to; nil when the runtime
	// pulls the image by its reference.
	ImageArtifact *ImageArtifact
	// Output, when set, gets the command's stdout and stderr as they come
	// (see Output, Note); nil for none.
	Output io.Writer
	// Paths are environment variables that name files inside the
	// environment, by their absolute path as a container sees them (an
	// identity's token files: ENVLEASE_IDENTITY_TOKEN_FILE...). A runtime
	// whose environments see the node's filesystem (process) puts their
	// folder before each (TemplateWithPaths). The template's env wins.
	Paths map[string]string
}

// TemplateWithPaths is e's template with e.Paths added to its env, each
// under root ("" for a container's own root), unless the template sets
// the variable itself.
func (e Env) TemplateWithPaths(root string) domain.Template {
	t := e.Template
	if len(e.Paths) == 0 {
		return t
	}
	env := make(map[string]string, len(t.Env)+len(e.Paths))
	for k, v := range e.Paths {
		env[k] = filepath.Join(root, v)
	}
	for k, v := range t.Env {
		env[k] = v
	}
	t.Env = env
	return t
}

// ImageArtifact is an image archive the agent can download.
type ImageArtifact struct {
	// SHA256 names the archive's bytes: a runtime that already unpacked
	// them need not download them again.
	SHA256 string
	// Fetch downloads it (size and SHA-256 checked) and gives a path to
	// read it at; done frees it.
	Fetch func(ctx context.Context) (path string, done func(), err error)
}

// Files is where an environment's files go before it starts.
type Files struct {
	// Root is the folder of the node at which the environment's absolute
	// paths begin: a process's folder, a container's root filesystem.
	Root string
	// Home is the folder, relative to Root, that relative share paths
	// and a snapshot are placed in ("" for Root itself).
	Home string
	// Owner, when set, owns what is unpacked there (the node's ids).
	Owner *Owner
	// Reserved are names at Root that the runtime mounts over (a
	// container's init): a checkpoint neither packs nor restores them.
	Reserved []string
	// Writable, when not nil, are the absolute paths inside below which
	// the environment may change files (a container's read-only root but
	// for these); nil: everywhere. The files endpoint keeps to them.
	Writable []string
	// InRoot says that absolute symbolic links inside mean Root (a
	// container's own root), not the node's root.
	InRoot bool
	// Workdir is the command's working folder, relative to Root, where
	// the files endpoint's relative paths start ("" for Home).
	Workdir string
	// Tmp is the folder, relative to Root, that the environment sees as
	// /tmp and /var/tmp ("" when it sees Root's own).
	Tmp string
	// Mounted are absolute paths inside where the environment sees a
	// mount of the node's (a build cache), not Root's files.
	Mounted []string
}

// IdentityReserved is the folder of an identity's token files
// (domain.IdentityPath) relative to Root: a checkpoint never packs it, so
// a token never leaves its environment in one.
var IdentityReserved = strings.TrimPrefix(domain.IdentityPath, "/")

// Owner is a user and group of the node.
type Owner struct{ UID, GID int }

// Handle is one prepared environment.
type Handle interface {
	Files() Files
	// Start starts the command; it returns once it runs.
	Start(ctx context.Context) error
	// Ports are the exports' ports, by service, once started.
	Ports() map[string]int
	// Dial connects to an export's port where the environment listens
	// (inside its network namespace, or at the node's address).
	Dial(ctx context.Context, port int) (net.Conn, error)
	// Namespaced says whether the environment has a network namespace of
	// its own (its ports are then its own, and reached only by Dial).
	Namespaced() bool
	// Done is closed once the command ended; Err then says how.
	Done() <-chan struct{}
	Err() error
	// Stop asks the command to end, and kills everything of the
	// environment after grace; it returns once it ended.
	Stop(grace time.Duration)
	// Remove removes everything the environment left on the node; it is
	// idempotent.
	Remove()
	// LogAttrs describe it in the agent's log (pid, root, image...).
	LogAttrs() []any
	// Execer runs a command inside it (envlease exec, shell).
	Execer
}
