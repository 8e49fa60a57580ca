// Package process is the runtime "process" behind the runtimes seam: the
// template's command as a process of the node, in a box of its own
// (package confine: a folder, and as root a user and cgroup of its own)
// and, as root, network, PID, mount and IPC namespaces of its own under an
// init (package nsinit), inside which the agent reaches its exports.
package process

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/buildcache"
	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// Config is what the runtime is given of the node.
type Config struct {
	// Node is how the node confines environments.
	Node *confine.Node
	// WorkDir holds a folder per environment, envs/<id>.
	WorkDir string
	// Address is the node's address, where an environment outside a
	// network namespace of its own listens.
	Address string
	// BuildCache holds the build caches of templates with buildCache.
	BuildCache *buildcache.Cache
	Log        *slog.Logger
}

// Runtime runs environments as processes of the node.
type Runtime struct {
	cfg   Config
	ports portPool
	cpu   atomic.Int64
	// The PATH of a confined environment, as searchPath last found it.
	pathMu         sync.Mutex
	confinedPath   string
	confinedPathAt time.Time
}

// New makes the runtime.
func New(cfg Config) *Runtime {
	rt := &Runtime{cfg: cfg}
	if cfg.Node.Users != nil {
		// A port below this one would be given to a process that cannot
		// bind it; the export gets another free port instead.
		rt.ports.lowest = unprivilegedPortStart()
	}
	return rt
}

// cpuTurn spreads environments' CPU affinity over the node's CPUs.
func (rt *Runtime) cpuTurn() int { return int(rt.cpu.Add(1) - 1) }

func (rt *Runtime) Name() string { return domain.RuntimeProcess }

// Prepare makes the environment's folder envs/<id>, its user and cgroup, or
// takes a box made ahead (confine.PreparedBoxes), whose folder keeps its name.
func (rt *Runtime) Prepare(ctx context.Context, e runtimes.Env) (runtimes.Handle, error) {
	var size confine.DiskSize
	if d := rt.cfg.Node.Disks; d != nil {
		var err error
		if size, err = d.Size(e.Template.Resources.Disk); err != nil {
			return nil, err
		}
	}
	// One made ahead when the node holds one of that disk (PreparedBoxes).
	b, err := rt.cfg.Node.TakeBox(ctx, filepath.Join(rt.cfg.WorkDir, "envs"), e.ID, size)
	if err != nil {
		return nil, err
	}
	h := &handle{rt: rt, t: e.TemplateWithPaths(b.Root), b: b, out: runtimes.Output(e)}
	if e.Template.BuildCache && rt.cfg.BuildCache != nil {
		o := buildcache.Owner{UID: os.Geteuid(), GID: os.Getegid()}
		if bo := b.Owner(); bo != nil {
			o = buildcache.Owner{UID: bo.UID, GID: bo.GID}
		}
		if h.cache, err = rt.cfg.BuildCache.Checkout(e.Org, e.Template.Name, o); err != nil {
			h.Remove()
			return nil, err
		}
	}
	return h, nil
}

// Recover clears what an earlier run left under envs/ (reclaim).
func (rt *Runtime) Recover(context.Context) (int, error) { return rt.reclaim(), nil }

// handle is one environment of the process runtime.
type handle struct {
	rt *Runtime
	t  domain.Template
	b  *confine.Box
	p  *proc
	// cache is the environment's build cache, nil without.
	cache *buildcache.Lease
	// out is where the command's output goes besides its folder's log.
	out io.Writer
}

func (h *handle) Files() runtimes.Files {
	f := runtimes.Files{Root: h.b.Root, Owner: h.b.Owner(), Reserved: []string{confine.TmpName, runtimes.IdentityReserved}}
	if dir, err := runtimes.WorkdirIn("/", h.t.Workdir); err == nil {
		f.Workdir = strings.TrimPrefix(dir, "/")
	}
	// In namespaces of its own the command sees its TmpName folder as /tmp.
	if h.Namespaced() {
		f.Tmp = confine.TmpName
	}
	return f
}

func (h *handle) Start(context.Context) error {
	cache := ""
	if h.cache != nil {
		cache = h.cache.Path()
	}
	p, err := h.rt.startProcess(h.t, h.b, cache, h.out)
	if err != nil {
		return err
	}
	h.p = p
	return nil
}

func (h *handle) Ports() map[string]int { return h.p.ports }

func (h *handle) Dial(ctx context.Context, port int) (net.Conn, error) {
	if h.p.net != nil {
		return h.p.net.Dial(ctx, port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(h.rt.cfg.Address, strconv.Itoa(port)))
}

func (h *handle) Namespaced() bool      { return h.p != nil && h.p.net != nil }
func (h *handle) Done() <-chan struct{} { return h.p.exited }
func (h *handle) Err() error            { return h.p.exitError(h.b.Disk.Full()) }

func (h *handle) Stop(grace time.Duration) {
	if h.p != nil {
		h.p.terminate(grace)
	}
}

func (h *handle) Remove() {
	h.rt.cfg.Node.Cleanup(h.b)
	if h.cache != nil {
		h.cache.Release()
	}
}

func (h *handle) LogAttrs() []any {
	if h.p == nil {
		return []any{"root", h.b.Root}
	}
	return []any{"pid", h.p.cmd.Process.Pid, "root", h.b.Root, "uid", h.p.uid()}
}

// CheckListener: outside a namespace of its own, the port must be held by
// the environment's own process, not another program of the node
// (runtimes.ListenerChecker).
func (h *handle) CheckListener(port int) error {
	p := h.p
	if p.net == nil && !p.verified.Load() && !p.listenerIsOurs(port) {
		p.foreign.Store(true)
		return fmt.Errorf("another program listens on port %d", port)
	}
	return nil
}

// AllReady records that every port was seen held by the process.
func (h *handle) AllReady() { h.p.verified.Store(true) }

// LostPortRace: see proc.lostPortRace (runtimes.PortRacer).
func (h *handle) LostPortRace() bool { return h.p != nil && h.p.lostPortRace(h.t) }
