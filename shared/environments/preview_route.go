package environments

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// A preview link goes to the node that ran its environment when the link
// was made. After a pause, a wake on another node, or a restart that moved
// its export, that node asks here where the link goes now, with the token it
// holds (docs/previews.md, "A link outlives a pause"): a paused environment
// is woken and waited for as an exec or a tunnel waits for it (getWoken),
// and the answer is the same preview's link on the node that runs it now.

// PreviewRouteRequest is the body of POST
// /v1/nodes/{id}/environments/{env}/previews/{preview}/route.
type PreviewRouteRequest struct {
	// Token is the link's token (from the link or the cookie it was traded
	// for), which the asking node signed.
	Token string `json:"token"`
}

// PreviewRoute is where a preview link goes now.
type PreviewRoute struct {
	URL  string `json:"url"`
	Node string `json:"node"`
}

// nodeCredentialReader reads a node as its credential may see it
// (store.Store): a node acts only for itself.
type nodeCredentialReader interface {
	GetNodeWithCredential(ctx context.Context, org, id, keyHash string) (domain.Node, error)
}

// RoutePreview answers where a preview link goes now, for the node that
// signed its token: the token must verify with that node's key and name
// the environment and the preview, which must still open (not revoked, not
// expired). It costs the node's read and the environment's, plus a wake's
// transaction and its wait when the environment is paused, and the new
// node's read.
func (s *Service) RoutePreview(ctx context.Context, p domain.Principal, nodeID, envID, previewID string, req PreviewRouteRequest) (PreviewRoute, error) {
	n, err := s.askingNode(ctx, p, nodeID)
	if err != nil {
		return PreviewRoute{}, err
	}
	c, err := ticket.Verify(n.TunnelKey, req.Token, s.clock.Now())
	if err != nil {
		return PreviewRoute{}, domain.Errorf(domain.CodeGone, "the preview's token does not open anything: %v", err)
	}
	if c.Open != ticket.OpenPreview || c.Org != p.OrgID || c.Node != n.ID || c.Env != envID || c.Preview != previewID {
		return PreviewRoute{}, domain.Invalid("token", "the token is not this node's link to preview %s of environment %s", previewID, envID)
	}
	// The environment is read (and woken) as its organization reads it;
	// the node credential carries no restrictions of a person's token. A
	// link that opens nothing any more wakes nothing.
	e, err := s.getActing(ctx, p, envID)
	if err != nil {
		return PreviewRoute{}, err
	}
	// The node signs its tokens itself, so it could sign one for any
	// environment of its organization: only one of its own pool, where it
	// may have run it, is routed (an environment never changes pool).
	if e.Pool != n.Pool {
		return PreviewRoute{}, domain.NotFound("environment")
	}
	i := slices.IndexFunc(e.Previews, func(pv domain.Preview) bool { return pv.ID == previewID })
	if i < 0 || !e.Previews[i].Live(s.clock.Now()) {
		return PreviewRoute{}, domain.Errorf(domain.CodeGone, "preview %s of environment %s is revoked or expired", previewID, envID)
	}
	pv := e.Previews[i]
	if !e.State.Live() && e.State != domain.StatePaused {
		return PreviewRoute{}, domain.Errorf(domain.CodeGone, "environment %s is %s: its previews open nothing", e.ID, e.State)
	}
	if waking(e) {
		if e, err = s.getWoken(ctx, p, envID); err != nil {
			return PreviewRoute{}, err
		}
	}
	if e.State != domain.StateReady || e.Node == "" {
		if none, err := s.noNodeFor(ctx, e); err != nil || none != nil {
			if err == nil {
				err = none
			}
			return PreviewRoute{}, err
		}
		return PreviewRoute{}, wakingError(e, "it is "+string(e.State))
	}
	x, err := pickExport(e, pv.Export)
	if err != nil {
		return PreviewRoute{}, domain.Errorf(domain.CodeGone, "environment %s no longer has export %s", e.ID, pv.Export)
	}
	to, err := s.previewNode(ctx, p, e)
	if err != nil {
		return PreviewRoute{}, err
	}
	base, err := s.previewBase(to)
	if err != nil {
		return PreviewRoute{}, err
	}
	l, err := s.previewLink(to.TunnelKey, p.OrgID, e, to.ID, x.Target, base, pv)
	if err != nil {
		return PreviewRoute{}, err
	}
	return PreviewRoute{URL: l.URL, Node: to.ID}, nil
}

// askingNode is the node a node credential names, if it is that
// credential's own.
func (s *Service) askingNode(ctx context.Context, p domain.Principal, id string) (domain.Node, error) {
	if !strings.HasPrefix(id, "node_") || len(id) > 64 || strings.ContainsAny(id, "#/ ") {
		return domain.Node{}, domain.NotFound("node")
	}
	var (
		n   domain.Node
		err error
	)
	if nr, ok := s.store.(nodeCredentialReader); ok && p.Recheck {
		n, err = nr.GetNodeWithCredential(ctx, p.OrgID, id, p.KeyHash)
	} else {
		n, err = s.store.GetNode(ctx, p.OrgID, id)
	}
	if err != nil {
		return domain.Node{}, err
	}
	if n.Pool != p.Pool || n.KeyID != p.KeyID || len(n.TunnelKey) == 0 {
		return domain.Node{}, domain.NotFound("node")
	}
	return n, nil
}

func (s *Service) handlePreviewRoute(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req PreviewRouteRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.RoutePreview(r.Context(), p, r.PathValue("id"), r.PathValue("env"), r.PathValue("preview"), req)
	if err != nil {
		return err
	}
	// The link opens the export to whoever holds it.
	httpapi.WriteSecret(w, http.StatusOK, out)
	return nil
}

func previewRouteRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/previews/{preview}/route", Access: httpapi.Node, Handler: s.handlePreviewRoute},
	}
}
