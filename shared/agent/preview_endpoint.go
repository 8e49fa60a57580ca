package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/preview"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// previewState is what an environment's preview links need on the node:
// the previews the control plane says are revoked (each heartbeat answer
// names them, until their tokens would have expired anyway) and its public
// exports. Their requests are activity (activity.go).
type previewState struct {
	mu      sync.Mutex
	revoked []string
	// public are the targets of the exports its template makes public,
	// by export name: their preview hosts open without a token.
	public map[string]string
}

func (p *previewState) setPublic(t domain.Template, exports []nodes.ExportTarget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.public = map[string]string{}
	for _, x := range exports {
		if t.Exports[x.Service].Public {
			p.public[x.Service] = x.Target
		}
	}
}

func (p *previewState) publicTarget(export string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.public[export]
	return t, ok
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
		Dial:    a.dialCounted(domain.ActivityPreview),
		Revoked: func(env, id string) bool {
			r := a.env(env)
			return r == nil || r.previews.isRevoked(id)
		},
		// A public export opens without a token while its environment is
		// ready here, its target being one of the environment's now.
		Public: func(env, export string) (string, bool) {
			r := a.env(env)
			if r == nil {
				return "", false
			}
			target, ok := r.previews.publicTarget(export)
			ts, ready := a.readyTargets(env)
			return target, ok && ready && slices.Contains(ts, target)
		},
		Activity: func(env string) { a.note(env, domain.ActivityPreview) },
		Opened: func(o preview.Opened) {
			a.log.Info("preview opened", "environment", o.Claims.Env, "preview", o.Claims.Preview,
				"host", o.Claims.Host, "remote", o.Remote, "userAgent", o.UserAgent)
			t.mu.Lock()
			defer t.mu.Unlock()
			if len(t.opened) < maxOpenedKept {
				t.opened = append(t.opened, nodes.PreviewOpened{Environment: o.Claims.Env, Preview: o.Claims.Preview,
					Remote: o.Remote, UserAgent: o.UserAgent, At: time.Now().UTC()})
			}
		},
		// A link whose environment is not ready here (paused, woken on
		// another node, its export moved) asks the API where it goes now.
		Reroute: func(ctx context.Context, c ticket.Claims, tok string) (string, error) {
			id, ok := t.identity()
			if !ok {
				return "", errors.New("the node is not registered")
			}
			u, err := a.api.PreviewRoute(ctx, id.Node, c.Env, c.Preview, tok)
			var ae *APIError
			if errors.As(err, &ae) {
				switch domain.Code(ae.Code) {
				case domain.CodeWaking:
					return "", preview.ErrWaking
				case domain.CodeNoNode:
					return "", preview.ErrNoNode
				case domain.CodeGone, domain.CodeNotFound, domain.CodeInvalid, domain.CodeForbidden:
					return "", fmt.Errorf("%w: %s", preview.ErrGone, ae.Message)
				}
			}
			return u, err
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

// previewsRevoked takes the service's message that preview links of an
// environment are revoked.
func (a *Agent) previewsRevoked(m nodes.Message) {
	if r := a.env(m.Environment); r != nil {
		r.previews.setRevoked(m.Previews)
	}
}

// maxOpenedKept bounds the openings kept for the next heartbeats; past it
// they are only in the agent's log.
const maxOpenedKept = 500

// previewsOpened takes the openings the next heartbeat carries (as many as
// one may).
func (a *Agent) previewsOpened() []nodes.PreviewOpened {
	if a.tun == nil {
		return nil
	}
	a.tun.mu.Lock()
	defer a.tun.mu.Unlock()
	n := min(len(a.tun.opened), nodes.MaxOpenedPerBeat)
	out := slices.Clone(a.tun.opened[:n])
	a.tun.opened = a.tun.opened[n:]
	return out
}

// previewsReopen puts back the openings of a heartbeat that failed.
func (a *Agent) previewsReopen(o []nodes.PreviewOpened) {
	if a.tun == nil || len(o) == 0 {
		return
	}
	a.tun.mu.Lock()
	defer a.tun.mu.Unlock()
	a.tun.opened = append(o, a.tun.opened...)
	if len(a.tun.opened) > maxOpenedKept {
		a.tun.opened = a.tun.opened[:maxOpenedKept]
	}
}
