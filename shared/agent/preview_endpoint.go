package agent

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/envlease/envlease/shared/preview"
)

// previewState is what an environment's preview links need on the node:
// the previews the control plane says are revoked (each heartbeat answer
// names them, until their tokens would have expired anyway) and whether a
// request went through one since the last heartbeat.
type previewState struct {
	mu      sync.Mutex
	revoked []string
	active  atomic.Bool
}

func (p *previewState) setRevoked(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A revocation is never forgotten while the environment runs here: an
	// answer that no longer names it (its token expired) changes nothing.
	for _, id := range ids {
		if !slices.Contains(p.revoked, id) {
			p.revoked = append(p.revoked, id)
		}
	}
}

func (p *previewState) isRevoked(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.revoked, id)
}

// previewsFirst sends requests whose Host names an export's preview
// ({export}-{environment}.{domain}) to the preview proxy, and everything
// else (tunnels, logs, by the node's own address) to next.
func (a *Agent) previewsFirst(t *tunnels, next http.Handler) http.Handler {
	h := preview.NewHandler(preview.Config{
		Identity: func() (preview.Identity, bool) {
			id, ok := t.identity()
			return preview.Identity{Org: id.Org, Node: id.Node, Key: id.Key}, ok
		},
		Targets: a.readyTargets,
		Dial:    a.dialTarget,
		Revoked: func(env, id string) bool {
			r := a.env(env)
			return r == nil || r.previews.isRevoked(id)
		},
		Activity: func(env string) {
			if r := a.env(env); r != nil {
				r.previews.active.Store(true)
			}
		},
		Opened: func(o preview.Opened) {
			a.log.Info("preview opened", "environment", o.Claims.Env, "preview", o.Claims.Preview,
				"host", o.Claims.Host, "remote", o.Remote, "userAgent", o.UserAgent)
		},
		Log: a.log,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := preview.ParseHost(r.Host); ok {
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
