package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// processRuntime is the runtime "process" behind the runtimes seam: the
// template's command as a process of the node, in a box (box, confine.go)
// and, as root, namespaces of its own (netns_linux.go). It lives in the
// agent's package because the box, the user ids and the init it shares
// with the agent's confinement are the agent's.
type processRuntime struct{ a *Agent }

func (r processRuntime) Name() string { return RuntimeProcess }

// Prepare makes the environment's folder envs/<id>, its user and cgroup.
func (r processRuntime) Prepare(_ context.Context, e runtimes.Env) (runtimes.Handle, error) {
	b, err := r.a.newBox(filepath.Join(r.a.cfg.WorkDir, "envs", e.ID))
	if err != nil {
		return nil, err
	}
	return &procHandle{a: r.a, t: e.Template, b: b}, nil
}

// Recover clears what an earlier run left under envs/ (reclaim).
func (r processRuntime) Recover(context.Context) (int, error) { return r.a.reclaim(), nil }

// procHandle is one environment of the process runtime.
type procHandle struct {
	a *Agent
	t domain.Template
	b *box
	p *proc
}

func (h *procHandle) Files() runtimes.Files {
	f := runtimes.Files{Root: h.b.root}
	if o := h.b.owner(); o != nil {
		f.Owner = &runtimes.Owner{UID: o.UID, GID: o.GID}
	}
	return f
}

func (h *procHandle) Start(context.Context) error {
	p, err := h.a.startProcess(h.t, h.b)
	if err != nil {
		return err
	}
	h.p = p
	return nil
}

func (h *procHandle) Ports() map[string]int { return h.p.ports }

func (h *procHandle) Dial(ctx context.Context, port int) (net.Conn, error) {
	if h.p.net != nil {
		return h.p.net.dial(ctx, port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(h.a.cfg.Address, strconv.Itoa(port)))
}

func (h *procHandle) Namespaced() bool      { return h.p != nil && h.p.net != nil }
func (h *procHandle) Done() <-chan struct{} { return h.p.exited }
func (h *procHandle) Err() error            { return h.p.exitError() }

func (h *procHandle) Stop(grace time.Duration) {
	if h.p != nil {
		h.p.terminate(grace)
	}
}

func (h *procHandle) Remove() { h.a.cleanup(h.b) }

func (h *procHandle) LogAttrs() []any {
	if h.p == nil {
		return []any{"root", h.b.root}
	}
	return []any{"pid", h.p.cmd.Process.Pid, "root", h.b.root, "uid", h.p.uid()}
}

// checkListener is asked once an export's port accepted a connection:
// outside a namespace of its own, the port must be held by the
// environment's own process, not another program of the node.
func (h *procHandle) checkListener(port int) error {
	p := h.p
	if p.net == nil && !p.verified.Load() && !p.listenerIsOurs(port) {
		p.foreign.Store(true)
		return fmt.Errorf("another program listens on port %d", port)
	}
	return nil
}

// allReady records that every port was seen held by the process.
func (h *procHandle) allReady() { h.p.verified.Store(true) }

// lostPortRace: see proc.lostPortRace.
func (h *procHandle) lostPortRace() bool { return h.p != nil && h.p.lostPortRace(h.t) }

// listenerChecker is what a runtime whose environments share the node's
// ports implements: readiness then also checks who listens.
type listenerChecker interface {
	checkListener(port int) error
	allReady()
}

// portRacer is what a runtime implements whose environments may lose a
// port to another program of the node between choosing and binding it.
type portRacer interface{ lostPortRace() bool }
