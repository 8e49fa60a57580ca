package environments

import (
	"context"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// LogTicketTTL is the life of a live log ticket: it is checked when the
// follow starts, and a follow then lasts as long as the environment runs.
const LogTicketTTL = 5 * time.Minute

// KeptLogLinkTTL is the life of a kept log's download link.
const KeptLogLinkTTL = 15 * time.Minute

// ReadHeir is what a live log, network log or metrics ticket and a kept
// log's link inherit from the token that asked for them: they open what
// environments:read reads, for minutes, never past that token's expiry.
var ReadHeir = auth.Heir{What: "a log or metrics ticket", ActsWith: []string{domain.ScopeEnvRead}, RestrictionsChecked: true}

// Linker signs artifact download links (artifacts.Service.LinkFor).
type Linker interface {
	LinkFor(ctx context.Context, a domain.Artifact, ttl time.Duration) (domain.Link, error)
}

// WithLinks lets the service hand out links to kept logs; without it a
// kept log is named but not linked.
func WithLinks(l Linker) Option { return func(s *Service) { s.links = l } }

// Logs is the answer to GET /v1/environments/{id}/logs: exactly one of Live
// (the environment runs: follow it on its node) and Kept (it ended: its
// log as uploaded) is set.
type Logs struct {
	Environment string       `json:"environment"`
	State       domain.State `json:"state"`
	Live        *LiveLog     `json:"live,omitempty"`
	Kept        *KeptLog     `json:"kept,omitempty"`
}

// LiveLog is where the node serves the running environment's log, with the
// ticket (Authorization: Bearer) that opens it.
type LiveLog struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
}

// KeptLog is the artifact that keeps an ended environment's log, and a
// signed link that downloads it.
type KeptLog struct {
	Artifact string     `json:"artifact"`
	Size     int64      `json:"size"`
	URL      string     `json:"url,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
}

// logKind is one log an environment has on its node and keeps when it
// ends: its log, or its network log.
type logKind struct {
	name    string                          // "log", "network log"
	url     func(tunnelURL string) string   // the node's endpoint that serves it live
	open    string                          // the ticket's kind
	kept    func(domain.Environment) string // the artifact that keeps it
	noneWhy string                          // why an ended environment may have none
}

var (
	envLog = logKind{name: "log", url: tunnel.LogsURL, open: ticket.OpenLogs,
		kept: func(e domain.Environment) string { return e.Log }, noneWhy: "its agent keeps none"}
	envNetLog = logKind{name: "network log", url: tunnel.NetLogURL, open: ticket.OpenNetLog,
		kept:    func(e domain.Environment) string { return e.NetworkLog },
		noneWhy: "its template's network is not open or rules"}
)

// Logs says where to read an environment's log: live on its node while it
// runs (one read of the environment and one of its node), the kept
// artifact once it ended.
func (s *Service) Logs(ctx context.Context, p domain.Principal, id string) (Logs, error) {
	return s.whereLog(ctx, p, id, envLog)
}

// whereLog says where an environment's log of kind k is.
func (s *Service) whereLog(ctx context.Context, p domain.Principal, id string, k logKind) (Logs, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil {
		return Logs{}, err
	}
	out := Logs{Environment: e.ID, State: e.State}
	switch {
	case e.State == domain.StatePending || (e.State.Live() && e.Node == ""):
		return Logs{}, domain.Errorf(domain.CodeConflict, "environment %s is pending: its %s begins once a node claims it; ask again shortly", e.ID, k.name)
	case e.State.Live():
		live, err := s.liveOnNode(ctx, p, e, "live "+k.name+"s", k.url, k.open)
		if err != nil {
			return Logs{}, err
		}
		out.Live = &live
		return out, nil
	case k.kept(e) == "":
		return Logs{}, domain.Errorf(domain.CodeConflict, "environment %s is %s and its node kept no %s of it (%s, or the upload failed or is under way; ask again shortly)", e.ID, e.State, k.name, k.noneWhy)
	}
	kept, err := s.keptLog(ctx, p, e, k.name, k.kept(e))
	if err != nil {
		return Logs{}, err
	}
	out.Kept = kept
	return out, nil
}

// keptLog is the sealed artifact id that keeps e's log of this kind ("log",
// "network log"), with a download link.
func (s *Service) keptLog(ctx context.Context, p domain.Principal, e domain.Environment, kind, id string) (*KeptLog, error) {
	a, err := s.store.GetArtifact(ctx, p.OrgID, id)
	if domain.ErrorCode(err) == domain.CodeNotFound || err == nil && a.ExpiredAt(s.clock.Now()) {
		return nil, domain.Errorf(domain.CodeConflict, "the %s of environment %s (artifact %s) has expired", kind, e.ID, id)
	}
	if err != nil {
		return nil, err
	}
	if a.State != domain.ArtifactSealed {
		return nil, domain.Errorf(domain.CodeConflict, "the %s of environment %s (artifact %s) is %s, not sealed: its upload is under way or failed", kind, e.ID, a.ID, a.State)
	}
	kept := &KeptLog{Artifact: a.ID, Size: a.Size}
	if s.links != nil {
		ttl := KeptLogLinkTTL
		exp := s.clock.Now().Add(ttl)
		lim, err := auth.Inherit(p, ReadHeir, auth.Limits{Expires: &exp})
		if err != nil {
			return nil, err
		}
		if !lim.Expires.After(s.clock.Now()) {
			return nil, domain.Errorf(domain.CodeUnauthorized, "the token has expired")
		}
		ttl = lim.Expires.Sub(s.clock.Now())
		l, err := s.links.LinkFor(ctx, a, ttl)
		if err != nil {
			return nil, err
		}
		kept.URL, kept.Expires = l.URL, &l.Expires
	}
	return kept, nil
}

// liveOnNode is where a live log of the environment is read on its node
// (what: "live logs", "network logs"): the node's endpoint (url of its
// tunnel URL) and a ticket that opens only that (open), valid
// LogTicketTTL.
func (s *Service) liveOnNode(ctx context.Context, p domain.Principal, e domain.Environment, what string, url func(string) string, open string) (LiveLog, error) {
	n, err := s.store.GetNode(ctx, p.OrgID, e.Node)
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return LiveLog{}, err
	}
	if err != nil || n.State != domain.NodeActive {
		return LiveLog{}, domain.Errorf(domain.CodeConflict, "the node that runs environment %s is no longer active; the environment is about to fail", e.ID)
	}
	u := url(n.TunnelURL)
	if u == "" || len(n.TunnelKey) == 0 {
		return LiveLog{}, domain.Errorf(domain.CodeConflict, "node %s, which runs environment %s, serves no %s: its agent registered without an endpoint (an older agent, or one started with -no-tunnel)", n.ID, e.ID, what)
	}
	exp := s.clock.Now().Add(LogTicketTTL)
	lim, err := auth.Inherit(p, ReadHeir, auth.Limits{Expires: &exp})
	if err != nil {
		return LiveLog{}, err
	}
	exp = lim.Expires.Truncate(time.Second).UTC()
	t, err := ticket.Sign(n.TunnelKey, ticket.Claims{Org: p.OrgID, Env: e.ID, Node: n.ID, Open: open, Exp: exp.Unix()})
	if err != nil {
		return LiveLog{}, domain.Internal(err)
	}
	return LiveLog{URL: u, Ticket: t, Expires: exp}, nil
}

func (s *Service) handleLogs(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	for k := range r.URL.Query() {
		return domain.BadRequest(k, "unknown query parameter %q: since and offset are the node's (live) and the client's (kept) to apply", k)
	}
	l, err := s.Logs(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The ticket and the link open the log to whoever holds them.
	httpapi.WriteSecret(w, http.StatusOK, l)
	return nil
}
