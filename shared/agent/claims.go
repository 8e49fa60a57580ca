package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/nodes"
)

// claims claims and starts environments while there is capacity.
func (a *Agent) claims(ctx context.Context, node string, wait time.Duration) error {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		if a.count() >= a.cfg.Capacity {
			select {
			case <-ctx.Done():
			case <-a.wake:
			case <-time.After(time.Second):
			}
			continue
		}
		if a.noRoom() != nil {
			// Short of disk: claim nothing, so a node with room takes the
			// work; look again a little later.
			select {
			case <-ctx.Done():
			case <-time.After(roomRecheck):
			}
			continue
		}
		a.claiming.Add(1)
		a.claimEpoch.Add(1)
		c, err := a.api.Claim(ctx, node, wait)
		if err == nil && c != nil {
			a.start(ctx, node, c) // registered before claiming ends, for the heartbeat
		}
		a.claiming.Add(-1)
		switch s := statusOf(err); {
		case err == nil:
			backoff = 200 * time.Millisecond
		case ctx.Err() != nil:
			return nil
		case s == http.StatusGone || s == http.StatusNotFound:
			return errLost
		case refused(err):
			return err
		default:
			if s != http.StatusConflict {
				a.log.Warn("claim failed", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
		}
	}
	return nil
}

// waitEnvs waits until every environment goroutine has stopped its process.
func (a *Agent) waitEnvs() {
	for {
		if a.count() == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start records a claimed environment and runs it in its own goroutine.
func (a *Agent) start(ctx context.Context, node string, c *nodes.Claimed) {
	r := &runningEnv{id: c.Environment.ID, env: c.Environment, stop: make(chan struct{}), m: newMeasured(c, a.now())}
	a.mu.Lock()
	a.envs[r.id] = r
	a.mu.Unlock()
	a.starting.Add(1)
	r.started = func() {
		r.startOnce.Do(func() {
			a.starting.Add(-1)
			a.warm.poke()
			// The box it may have taken is made again now, not while it
			// started.
			a.prepared().Fill()
		})
	}
	go func() {
		defer r.started() // failed or stopped before it was ready
		defer func() {
			a.mu.Lock()
			delete(a.envs, r.id)
			a.mu.Unlock()
			a.signal()
		}()
		a.runEnv(ctx, node, r, c)
	}()
}
