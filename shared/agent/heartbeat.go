package agent

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// heartbeats heartbeats every interval and acts on the answer; it returns
// errLost when the control plane no longer knows the node as active.
func (a *Agent) heartbeats(ctx context.Context, node string, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		epoch := a.claimEpoch.Load()
		inFlight := a.claiming.Load() > 0
		ids := a.ids()
		opened := a.previewsOpened()
		active := a.activeEnvs()
		beat, err := a.api.Heartbeat(ctx, node, ids, active, opened)
		if err != nil {
			a.previewsReopen(opened)
			a.unreport(active)
		}
		if statusOf(err) == http.StatusGone || statusOf(err) == http.StatusNotFound {
			return errLost
		}
		if refused(err) {
			return err
		}
		if err != nil {
			a.log.Warn("heartbeat failed", "err", err)
			continue
		}
		// Whether a claim overlapped this heartbeat: then an environment the
		// answer assigns to the node may be one the claim is returning.
		claimRaced := inFlight || a.claiming.Load() > 0 || a.claimEpoch.Load() != epoch
		a.apply(ctx, node, ids, beat, claimRaced)
	}
}

func (a *Agent) apply(ctx context.Context, node string, sent []string, beat nodes.Beat, claimRaced bool) {
	a.setTemplates(beat.Templates)
	a.applyStates(ctx, node, sent, beat.Environments, claimRaced)
}

// applyStates acts on what a heartbeat's answer says of the environments:
// stop what is stopping or over, and what was named but is not the node's.
func (a *Agent) applyStates(ctx context.Context, node string, sent []string, states []nodes.EnvState, claimRaced bool) {
	known := map[string]bool{}
	for _, st := range states {
		known[st.ID] = true
		r := a.env(st.ID)
		if r != nil {
			r.previews.setRevoked(st.RevokedPreviews)
		}
		if r != nil && st.State == domain.StateReady && st.Checkpoint != nil {
			a.checkpointOrdered(ctx, node, st.ID, st.Checkpoint)
		}
		if r != nil && st.Network != nil {
			a.networkBeat(st.ID, st.Network)
		}
		switch {
		case r != nil && st.State == domain.StateStopping:
			r.requestStop(true)
		case r != nil && (st.State == domain.StateStopped || st.State == domain.StateFailed):
			r.requestStop(false)
		case r == nil && (st.State == domain.StateStarting || st.State == domain.StateReady) && !claimRaced:
			// Assigned here, but the claim's answer never arrived: nothing
			// runs it. Say so, so the quota is not held by nothing.
			a.report(ctx, node, st.ID, nodes.Report{State: domain.StateFailed, Error: "the node does not run this environment (the answer to its claim was lost)"})
		case r == nil && st.State == domain.StateStopping:
			a.report(ctx, node, st.ID, nodes.Report{State: domain.StateStopped})
		}
	}
	for _, id := range sent {
		if !known[id] {
			if r := a.env(id); r != nil {
				r.requestStop(false)
			}
		}
	}
}

func (a *Agent) ids() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.envs))
	for id := range a.envs {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (a *Agent) env(id string) *runningEnv {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.envs[id]
}

func (a *Agent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.envs)
}
