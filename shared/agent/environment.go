package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// runningEnv is one environment the agent runs.
type runningEnv struct {
	id  string
	env domain.Environment
	// h is what runs it, set once prepared; tunnels dial through it.
	h atomic.Pointer[runtimes.Handle]
	// stop is closed when the control plane says the environment is over;
	// report says whether to report stopped (stopping) or not (already over).
	stopOnce sync.Once
	stop     chan struct{}
	report   atomic.Bool
	// targets are the export targets once ready, which tunnels may reach.
	targets atomic.Pointer[[]string]
	// checkpoints are the ids of the checkpoints ordered (checkpoint.go).
	checkpoints sync.Map
	// execs counts its exec sessions running now (Config.MaxExecs).
	execs atomic.Int64
	// files counts its file requests now (files_endpoint.go).
	files atomic.Int64
	// started is called once the environment is reported ready (or has
	// ended before): it is no longer starting (Agent.starting).
	started   func()
	startOnce sync.Once
	// previews are what its preview links need on this node (preview_endpoint.go).
	previews previewState
	// m is what the node measures of it: activity and metrics (activity.go).
	m *measured
	// secrets are the values of the secrets its template binds, in
	// memory only (secrets.go).
	secrets envSecrets
}

func (r *runningEnv) requestStop(report bool) {
	r.stopOnce.Do(func() {
		r.report.Store(report)
		close(r.stop)
	})
}

// runEnv takes one environment from claimed to over, through the runtime
// its template names (runtimes.Runtime): prepare, files in, start, ready,
// then wait for its end or a stop.
func (a *Agent) runEnv(ctx context.Context, node string, r *runningEnv, c *nodes.Claimed) {
	log := a.log.With("environment", r.id, "template", c.Template.Name)
	// No starting report: the claim made it starting, and a report would only
	// put a round trip before a warm environment is handed over.

	// Claimed while the node is short of disk (the disk filled during the
	// claim, or no other node took it: socketClaims): refused, with why.
	if err := a.noRoom(); err != nil {
		a.fail(ctx, node, r.id, fmt.Errorf("the node refused the environment: %w", err), log)
		return
	}
	rt, err := a.runtimeFor(c.Template)
	if err != nil {
		a.fail(ctx, node, r.id, err, log)
		return
	}
	if err := a.fetchSecrets(ctx, node, r, c.Template); err != nil {
		a.fail(ctx, node, r.id, fmt.Errorf("the secrets the template binds: %w", err), log)
		return
	}
	defer r.secrets.set(nil) // dropped from memory when it ends

	var (
		h        runtimes.Handle
		restored *domain.Restored
		// refresh is when the identity's tokens are fetched again (zero
		// without an identity).
		refresh time.Time
	)
	// A warm environment started before its files could arrive (an
	// identity's token files among them: its command must find them there).
	if c.Snapshot == nil && len(c.Shares) == 0 && c.Environment.Identity == nil {
		h = a.warm.take(c.Template)
	}
	warm := h != nil
	if warm {
		a.adoptWarmBoundary(h, r)
		a.adoptWarmLog(h, r.id)
		a.logf(r.id, "claimed by node %s: template %s, handed a warm environment (runtime %s) started before", node, c.Template.Name, rt.Name())
		log.Info("handed a warm environment", append([]any{"runtime", rt.Name()}, h.LogAttrs()...)...)
		// Refill the pool once this lease is ready or over (take does
		// not, so the replacement's start does not compete with it).
		defer a.warm.poke()
	} else {
		a.openLog(r.id)
		a.logf(r.id, "claimed by node %s: template %s (runtime %s)", node, c.Template.Name, rt.Name())
		h, restored, refresh, err = a.prepare(ctx, rt, node, r.id, c)
		if err != nil {
			a.fail(ctx, node, r.id, err, log)
			return
		}
		a.logf(r.id, "started")
		log.Info("started", append([]any{"runtime", rt.Name()}, h.LogAttrs()...)...)
	}
	defer func() { h.Remove() }() // h may be replaced below
	r.h.Store(&h)

	// A warm environment's pool waited for it to be ready (its ports,
	// who listens on them) and take found it alive: checking again would
	// only put the port checks' round trips before the ready report.
	if !warm {
		err = a.waitReady(ctx, h, r.stop)
	}
	if pr, ok := h.(runtimes.PortRacer); err != nil && c.Snapshot == nil && ok && pr.LostPortRace() {
		// A template's port was free when it was chosen and someone else
		// bound it before the command did: start once more, afresh, on
		// ports of the node's choosing rather than fail the lease for a
		// race it lost.
		log.Info("a template port was taken before the command bound it; starting again on other ports", "err", err)
		id := r.id
		h.Remove()
		a.logf(r.id, "a port of the template was taken before the command bound it: starting again on other ports")
		h2, perr := rt.Prepare(ctx, runtimes.Env{ID: id, Template: withAnyPorts(c.Template), Org: a.organization(), Output: a.logOutput(r.id),
			Paths: identityPaths(c.Environment.Identity)})
		if perr == nil && c.Environment.Identity != nil {
			if refresh, perr = a.writeIdentity(ctx, node, r.id, h2.Files()); perr != nil {
				h2.Remove()
			}
		}
		if perr == nil {
			if perr = h2.Start(ctx); perr != nil {
				h2.Remove()
			}
		}
		if perr != nil {
			a.fail(ctx, node, r.id, perr, log)
			return
		}
		h = h2
		r.h.Store(&h)
		err = a.waitReady(ctx, h, r.stop)
	}
	switch {
	case err == nil:
	case errors.Is(err, errStopped):
		a.finish(ctx, node, r, h, log)
		return
	case ctx.Err() != nil:
		h.Stop(a.cfg.Grace)
		return
	default:
		// A command that ended before it was ready exited; anything else
		// kept it from being ready.
		reason := domain.StopFailed
		select {
		case <-h.Done():
			reason = domain.StopExited
		default:
		}
		h.Stop(a.cfg.Grace)
		a.failAs(ctx, node, r.id, err, domain.StopReasonOf(errText(err), reason), log)
		return
	}
	ports := h.Ports()
	exports := make([]nodes.ExportTarget, 0, len(ports))
	for s, port := range ports {
		exports = append(exports, nodes.ExportTarget{Service: s, Target: net.JoinHostPort(a.cfg.Address, strconv.Itoa(port))})
	}
	sort.Slice(exports, func(i, j int) bool { return exports[i].Service < exports[j].Service })
	r.setTargets(exports) // before the API says ready, so a ticket never comes first
	r.previews.setPublic(c.Template, exports)
	if err := a.reportErr(ctx, node, r.id, nodes.Report{State: domain.StateReady, Exports: exports, Restored: restored}); err != nil {
		// 409: it was deleted or timed out while starting; anything else
		// (the API unreachable after retries): the heartbeat decides.
		if statusOf(err) == http.StatusConflict {
			r.requestStop(true)
		}
		log.Info("ready not recorded", "err", err)
	} else {
		a.logf(r.id, "ready%s", exportsText(exports))
		log.Info("ready", "exports", exports)
	}
	if r.started != nil {
		r.started() // and the warm pool may refill
	}
	if !refresh.IsZero() {
		go a.keepIdentity(ctx, node, r.id, h.Files(), refresh, r.stop, h.Done(), log)
	}

	select {
	case <-h.Done():
		select {
		case <-r.stop: // it was being stopped anyway
			a.finish(ctx, node, r, h, log)
		default:
			err := h.Err()
			a.failAs(ctx, node, r.id, err, domain.StopReasonOf(errText(err), domain.StopExited), log)
		}
	case <-r.stop:
		a.finish(ctx, node, r, h, log)
	case <-ctx.Done():
		// The agent is shutting down (or the node was lost): stop the
		// environment; the control plane learns through deregistration or
		// the lost-node sweep.
		h.Stop(a.cfg.Grace)
	}
}

// prepare readies a claimed environment that no warm one serves: the
// runtime prepares it (downloading an image artifact through the agent if
// it must), the agent restores the snapshot and unpacks the shares into its files within one archive
// budget, and the runtime starts it. On failure nothing of it is left.
func (a *Agent) prepare(ctx context.Context, rt runtimes.Runtime, node, id string, c *nodes.Claimed) (runtimes.Handle, *domain.Restored, time.Time, error) {
	h, err := rt.Prepare(ctx, runtimes.Env{ID: id, Template: c.Template, Org: a.organization(), ImageArtifact: a.imageArtifact(c), Output: a.logOutput(id),
		Paths: identityPaths(c.Environment.Identity)})
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	var refresh time.Time
	var restored *domain.Restored
	files := h.Files()
	budget := a.budget()
	if c.Snapshot != nil {
		restored, err = a.restore(ctx, c.Snapshot, files, budget)
	}
	if err == nil {
		err = a.unpackShares(ctx, c.Shares, files, budget)
	}
	if err == nil && c.Environment.Identity != nil {
		refresh, err = a.writeIdentity(ctx, node, id, files)
	}
	if err == nil {
		err = h.Start(ctx)
	}
	if err != nil {
		h.Remove()
		return nil, nil, time.Time{}, err
	}
	return h, restored, refresh, nil
}

// runtimeFor is the runtime of the node that runs t, or why none does.
func (a *Agent) runtimeFor(t domain.Template) (runtimes.Runtime, error) {
	name := t.Runtime
	if name == "" {
		name = RuntimeProcess
	}
	if rt, ok := a.runtimes[name]; ok {
		return rt, nil
	}
	return nil, fmt.Errorf("runtime %q is not supported by this node: it offers %s", name, a.runtimeText())
}

// finish stops an environment the control plane ended: SIGTERM, grace,
// SIGKILL, then report stopped if it was stopping.
func (a *Agent) finish(ctx context.Context, node string, r *runningEnv, h runtimes.Handle, log *slog.Logger) {
	h.Stop(a.cfg.Grace)
	log.Info("stopped")
	a.logf(r.id, "stopped")
	// Remove what it left before saying stopped: whoever reads `stopped`
	// may rely on nothing of the environment being left on the node.
	h.Remove()
	// Its log is kept before its end is reported, so whoever reads the
	// end finds the log linked.
	a.keepLog(ctx, node, r.id)
	a.keepNetLog(ctx, node, r.id)
	if r.report.Load() {
		a.report(ctx, node, r.id, nodes.Report{State: domain.StateStopped, Metrics: a.history(r.id)})
	}
}

func (a *Agent) fail(ctx context.Context, node, id string, err error, log *slog.Logger) {
	a.failAs(ctx, node, id, err, domain.StopReasonOf(errText(err), domain.StopFailed), log)
}

// failAs is fail with the reason the report gives (domain.NodeStopReasons):
// exited when the command ended on its own, out_of_memory or out_of_disk
// when its error says so, failed otherwise.
func (a *Agent) failAs(ctx context.Context, node, id string, err error, reason string, log *slog.Logger) {
	log.Warn("failed", "err", err, "reason", reason)
	a.noteFailure(id, err)
	a.keepLog(ctx, node, id)
	a.keepNetLog(ctx, node, id)
	a.report(ctx, node, id, nodes.Report{State: domain.StateFailed, Error: errText(err), Reason: reason, Metrics: a.history(id)})
}

func errText(err error) string {
	if err == nil {
		return "ended"
	}
	return err.Error()
}
