package environments

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/preview"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// Bounds of previews.
const (
	// DefaultPreviewTTL is a preview's life when the request names none.
	DefaultPreviewTTL = time.Hour
	// DefaultPreviewMax is the longest a preview may live unless the
	// service is configured otherwise (WithPreviews).
	DefaultPreviewMax = 24 * time.Hour
	// MaxPreviews bounds the previews an environment keeps (live, and
	// revoked ones until they would have expired), so its item stays small.
	MaxPreviews = 20
)

// PreviewOptions configure previews for the whole service.
type PreviewOptions struct {
	// Domain is the DNS name preview hosts sit under, "{node}" standing
	// for the node's name: a host is "{export}-{environment}.{Domain}" at
	// the node's tunnel endpoint's port. Empty: previews are served only
	// by nodes whose tunnel endpoint is on the loopback, under
	// "localhost", which browsers resolve to the loopback themselves.
	Domain string
	// Max bounds a preview's life; 0 is DefaultPreviewMax.
	Max time.Duration
}

// WithPreviews configures previews.
func WithPreviews(o PreviewOptions) Option { return func(s *Service) { s.previews = o } }

// PreviewRequest is the body of POST /v1/environments/{id}/previews.
type PreviewRequest struct {
	// Export names the web export; it may be left out when there is one.
	Export string `json:"export"`
	// Expires is how long the link opens, a Go duration ("1h", "30m").
	Expires string `json:"expires"`
}

// PreviewLink is a preview as the API shows it: with its URL while it
// opens (the token inside it is the link's whole secret), "" once it does
// not.
type PreviewLink struct {
	domain.Preview
	URL string `json:"url"`
}

// PreviewHeir is what a preview link carries of its maker: it opens an
// export of an environment the maker was just checked to reach
// (environments:lease, its restrictions), so it acts with that scope, and
// ends no later than its maker.
var PreviewHeir = auth.Heir{What: "a preview link", ActsWith: []string{domain.ScopeEnvLease}, RestrictionsChecked: true}

// CreatePreview makes a link to one export of a ready environment, after
// writing its environment.preview event. It costs the environment's read,
// the node's, the update of the environment's record and the event's write.
func (s *Service) CreatePreview(ctx context.Context, p domain.Principal, id string, req PreviewRequest, from string) (PreviewLink, error) {
	now := s.clock.Now()
	org, err := s.store.GetOrg(ctx, p.OrgID)
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return PreviewLink{}, err
	}
	ttl, err := s.previewTTL(req.Expires, org.MaxPreviewLifetime.Std())
	if err != nil {
		return PreviewLink{}, err
	}
	for attempt := 0; ; attempt++ {
		// A paused environment wakes for its preview link (pause.go).
		e, err := s.getWoken(ctx, p, id)
		if err != nil {
			return PreviewLink{}, err
		}
		if err := previewable(e); err != nil {
			return PreviewLink{}, err
		}
		x, err := pickExport(e, req.Export)
		if err != nil {
			return PreviewLink{}, err
		}
		label, err := preview.Label(x.Service, e.ID)
		if err != nil {
			return PreviewLink{}, domain.Invalid("export", "export %q cannot have a preview: %v", x.Service, err)
		}
		n, err := s.previewNode(ctx, p, e)
		if err != nil {
			return PreviewLink{}, err
		}
		base, err := s.previewBase(n)
		if err != nil {
			return PreviewLink{}, err
		}
		// A preview ends with the environment, and never outlives or
		// outranks the credential that made it (auth.Inherit). Any token
		// that expires caps it, limited or not: the link is a bearer
		// secret, and one made by a console sign-in should end with it.
		exp := now.Add(ttl)
		if e.Expires.Before(exp) {
			exp = e.Expires
		}
		lim, err := auth.Inherit(p, PreviewHeir, auth.Limits{Expires: &exp})
		if err != nil {
			return PreviewLink{}, err
		}
		exp = *lim.Expires
		if p.Expires != nil && p.Expires.Before(exp) {
			exp = *p.Expires
		}
		exp = exp.Truncate(time.Second).UTC()
		pv := domain.Preview{ID: domain.SortableID("pv_", now), Export: x.Service, Host: label + "." + base.domain,
			Expires: exp, Created: now.UTC(), CreatedBy: createdBy(p)}
		kept := keptPreviews(e.Previews, now)
		live := 0
		for _, k := range kept {
			if k.Live(now) {
				live++
			}
		}
		if len(kept) >= MaxPreviews {
			return PreviewLink{}, domain.Errorf(domain.CodeConflict, "environment %s has %d previews (%d open): revoke one, or wait for one to expire", e.ID, len(kept), live)
		}
		link, err := s.previewLink(n.TunnelKey, p.OrgID, e, n.ID, x.Target, base, pv)
		if err != nil {
			return PreviewLink{}, err
		}
		_, ok, err := s.store.SetEnvironmentPreviews(ctx, e, append(kept, pv))
		if err != nil {
			return PreviewLink{}, err
		}
		if !ok {
			if attempt < 3 {
				continue // a touch or another preview came between: read again
			}
			return PreviewLink{}, domain.Errorf(domain.CodeConflict, "environment %s changed while the preview was made; ask again", e.ID)
		}
		ev := domain.NewEvent(ctx, domain.EventEnvPreview, p.OrgID, domain.Subject{Kind: "environment", ID: e.ID}, now,
			map[string]any{"preview": pv.ID, "export": pv.Export, "expires": pv.Expires, "node": n.ID, "from": from, "action": "created"})
		if err := s.store.PutEvent(ctx, ev); err != nil {
			return PreviewLink{}, err
		}
		return link, nil
	}
}

// noPreviewNode says the environment has no node that serves its previews
// now (gone, inactive, without an endpoint): its links are listed empty.
func noPreviewNode(err error) bool {
	switch domain.ErrorCode(err) {
	case domain.CodeConflict, domain.CodeNotFound, domain.CodeGone:
		return true
	}
	return false
}

// ListPreviews returns an environment's previews, newest first, with the
// URLs of those that still open and are the caller's own to see again.
func (s *Service) ListPreviews(ctx context.Context, p domain.Principal, id string) ([]PreviewLink, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	kept := keptPreviews(e.Previews, now)
	out := make([]PreviewLink, 0, len(kept))
	var signer func(domain.Preview) (PreviewLink, error)
	for _, pv := range kept {
		if !pv.Live(now) || e.State != domain.StateReady || !mayShowLink(p, pv) {
			out = append(out, PreviewLink{Preview: pv})
			continue
		}
		if signer == nil {
			signer = func(domain.Preview) (PreviewLink, error) { return PreviewLink{}, nil }
			n, err := s.previewNode(ctx, p, e)
			if err != nil && !noPreviewNode(err) {
				// The store did not answer: a listing without the links
				// would look as if they no longer open.
				return nil, err
			}
			if err == nil {
				if base, err := s.previewBase(n); err == nil {
					signer = func(pv domain.Preview) (PreviewLink, error) {
						x, _ := pickExport(e, pv.Export)
						return s.previewLink(n.TunnelKey, p.OrgID, e, n.ID, x.Target, base, pv)
					}
				}
			}
		}
		l, err := signer(pv)
		if err != nil {
			return nil, err
		}
		if l.URL == "" {
			l.Preview = pv
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// mayShowLink says whether a listing may sign pv's link again for p. A
// link is a bearer secret that acts until it expires, so listing it is
// making it anew: only its creator sees it again, and only when it does
// not outlive the caller's own token, or a short-lived token (an exchanged
// CI token, a teammate's) would collect longer links than it could make.
func mayShowLink(p domain.Principal, pv domain.Preview) bool {
	if pv.CreatedBy == "" || pv.CreatedBy != createdBy(p) {
		return false
	}
	return p.Expires == nil || !pv.Expires.After(*p.Expires)
}

// RevokePreview ends a preview: the node hears of it with its next
// heartbeat (every few seconds), and refuses its link and its cookie from
// then on. Revoking a revoked or expired preview changes nothing.
func (s *Service) RevokePreview(ctx context.Context, p domain.Principal, id, pid string, from string) error {
	for attempt := 0; ; attempt++ {
		e, err := s.getActing(ctx, p, id)
		if err != nil {
			return err
		}
		now := s.clock.Now()
		i := slices.IndexFunc(e.Previews, func(pv domain.Preview) bool { return pv.ID == pid })
		if i < 0 {
			return domain.NotFound("preview " + pid)
		}
		// A paused environment's links open again when it wakes
		// (preview_route.go): they are revocable while it is paused too.
		if !e.Previews[i].Live(now) || !e.State.Live() && e.State != domain.StatePaused {
			return nil // it opens nothing already
		}
		ps := slices.Clone(e.Previews)
		at := now.UTC()
		ps[i].Revoked = &at
		_, ok, err := s.store.SetEnvironmentPreviews(ctx, e, keptPreviews(ps, now))
		if err != nil {
			return err
		}
		if !ok {
			if attempt < 3 {
				continue
			}
			return domain.Errorf(domain.CodeConflict, "environment %s changed while the preview was revoked; ask again", e.ID)
		}
		// The stopper that tells nodes of stops tells them of this too, when
		// it can; the heartbeat answers say it anyway.
		if r, ok := s.stopper.(previewRevoker); ok {
			var ids []string
			for _, pv := range ps {
				if pv.Revoked != nil {
					ids = append(ids, pv.ID)
				}
			}
			r.RevokePreviews(ctx, e, ids)
		}
		ev := domain.NewEvent(ctx, domain.EventEnvPreviewRevoked, p.OrgID, domain.Subject{Kind: "environment", ID: e.ID}, now,
			map[string]any{"preview": pid, "export": ps[i].Export, "from": from})
		return s.store.PutEvent(ctx, ev)
	}
}

// previewRevoker tells a node at once that previews are revoked.
type previewRevoker interface {
	RevokePreviews(ctx context.Context, e domain.Environment, ids []string)
}

// previewTTL reads a request's expires, bounded by the service's maximum
// and the organization's (orgMax, 0 for none).
func (s *Service) previewTTL(v string, orgMax time.Duration) (time.Duration, error) {
	max := s.previews.Max
	if max <= 0 {
		max = DefaultPreviewMax
	}
	if orgMax > 0 && orgMax < max {
		max = orgMax
	}
	if v == "" {
		return min(DefaultPreviewTTL, max), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute || d > max {
		return 0, domain.Invalid("expires", "expires must be a duration from 1m to %s, such as 1h", max)
	}
	return d, nil
}

func previewable(e domain.Environment) error {
	switch {
	case e.State == domain.StatePending || e.State == domain.StateStarting:
		return domain.Errorf(domain.CodeConflict, "environment %s is %s: a preview opens once it is ready; wait for it and ask again", e.ID, e.State)
	case e.State != domain.StateReady || e.Node == "":
		return domain.Errorf(domain.CodeConflict, "environment %s is %s: it no longer runs, so there is nothing to preview", e.ID, e.State)
	}
	return nil
}

// pickExport is the export named, or the only one when none is.
func pickExport(e domain.Environment, name string) (domain.EnvExport, error) {
	var names []string
	for _, x := range e.Exports {
		if x.Target == "" {
			continue
		}
		if x.Service == name {
			return x, nil
		}
		names = append(names, x.Service)
	}
	switch {
	case len(names) == 0:
		return domain.EnvExport{}, domain.Errorf(domain.CodeConflict, "environment %s has no exports: there is nothing to preview", e.ID)
	case name == "" && len(names) == 1:
		return e.Exports[slices.IndexFunc(e.Exports, func(x domain.EnvExport) bool { return x.Service == names[0] })], nil
	case name == "":
		return domain.EnvExport{}, domain.Invalid("export", "environment %s has several exports (%s): name one", e.ID, strings.Join(names, ", "))
	}
	return domain.EnvExport{}, domain.Invalid("export", "environment %s has no export %q; it has %s", e.ID, name, strings.Join(names, ", "))
}

func (s *Service) previewNode(ctx context.Context, p domain.Principal, e domain.Environment) (domain.Node, error) {
	n, err := s.store.GetNode(ctx, p.OrgID, e.Node)
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return domain.Node{}, err
	}
	if err != nil || n.State != domain.NodeActive {
		return domain.Node{}, domain.Errorf(domain.CodeConflict, "the node that runs environment %s is no longer active; the environment is about to fail", e.ID)
	}
	if n.TunnelURL == "" || len(n.TunnelKey) == 0 {
		return domain.Node{}, domain.Errorf(domain.CodeConflict, "node %s, which runs environment %s, serves no previews: its agent registered without a tunnel endpoint (started with -no-tunnel)", n.ID, e.ID)
	}
	return n, nil
}

// previewBase is where a node's previews are: the scheme and port of its
// tunnel endpoint, under the preview domain.
type previewBase struct{ scheme, domain, port string }

func (s *Service) previewBase(n domain.Node) (previewBase, error) {
	u, err := url.Parse(n.TunnelURL)
	if err != nil {
		return previewBase{}, domain.Internal(err)
	}
	b := previewBase{scheme: "http", port: u.Port()}
	if u.Scheme == "wss" {
		b.scheme = "https"
	}
	switch {
	case s.previews.Domain != "":
		b.domain = strings.ReplaceAll(s.previews.Domain, "{node}", strings.ToLower(n.Name))
	case loopback(u.Hostname()):
		b.domain = "localhost"
	default:
		return previewBase{}, domain.Errorf(domain.CodeConflict, "this service has no preview domain: node %s's previews need a DNS name that reaches its tunnel endpoint (see the previews page of the docs)", n.ID)
	}
	return b, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// previewLink signs pv's token and makes its URL. The token is the same
// each time for the same preview, so a listing shows the link it made.
func (s *Service) previewLink(key []byte, org string, e domain.Environment, node, target string, b previewBase, pv domain.Preview) (PreviewLink, error) {
	if target == "" {
		return PreviewLink{Preview: pv}, nil // the export is gone: nothing opens
	}
	// The host is the node's: after a pause the environment may run on
	// another node, under that node's preview domain.
	label, err := preview.Label(pv.Export, e.ID)
	if err != nil {
		return PreviewLink{}, domain.Internal(err)
	}
	pv.Host = label + "." + b.domain
	tk, err := ticket.Sign(key, ticket.Claims{Org: org, Env: e.ID, Node: node, Targets: []string{target},
		Exp: pv.Expires.Unix(), Open: ticket.OpenPreview, Preview: pv.ID, Host: pv.Host})
	if err != nil {
		return PreviewLink{}, domain.Internal(err)
	}
	host := pv.Host
	if b.port != "" && !(b.scheme == "http" && b.port == "80") && !(b.scheme == "https" && b.port == "443") {
		host = net.JoinHostPort(host, b.port)
	}
	u := url.URL{Scheme: b.scheme, Host: host, Path: "/", RawQuery: preview.Param + "=" + tk}
	return PreviewLink{Preview: pv, URL: u.String()}, nil
}

// keptPreviews drops the previews whose tokens no node accepts any more.
func keptPreviews(ps []domain.Preview, now time.Time) []domain.Preview {
	out := make([]domain.Preview, 0, len(ps))
	for _, pv := range ps {
		if now.Before(pv.Expires.Add(ticket.Leeway)) {
			out = append(out, pv)
		}
	}
	return out
}

func createdBy(p domain.Principal) string {
	if p.UserID != "" {
		return p.UserID
	}
	return p.KeyID
}

func (s *Service) handleCreatePreview(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req PreviewRequest
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	l, err := s.CreatePreview(r.Context(), p, r.PathValue("id"), req, httpapi.PeerAddr(r))
	if err != nil {
		return err
	}
	// The URL opens the export to whoever holds it until it expires.
	httpapi.WriteSecret(w, http.StatusCreated, l)
	return nil
}

type previewsBody struct {
	Previews []PreviewLink `json:"previews"`
}

func (s *Service) handleListPreviews(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	ls, err := s.ListPreviews(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusOK, previewsBody{Previews: ls})
	return nil
}

func (s *Service) handleRevokePreview(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	if err := s.RevokePreview(r.Context(), p, r.PathValue("id"), r.PathValue("preview"), httpapi.PeerAddr(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func previewRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/environments/{id}/previews", Access: httpapi.Member, Handler: s.handleCreatePreview},
		{Method: http.MethodGet, Path: "/v1/environments/{id}/previews", Access: httpapi.Member, Handler: s.handleListPreviews},
		{Method: http.MethodDelete, Path: "/v1/environments/{id}/previews/{preview}", Access: httpapi.Member, Handler: s.handleRevokePreview},
	}
}
