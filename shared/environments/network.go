package environments

import (
	"context"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// networkRoutes are an environment's network: its log of connections.
func networkRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/v1/environments/{id}/network-log", Access: httpapi.Member, Handler: s.handleNetworkLog},
	}
}

// NetworkLog says where an environment's network log is (GET
// /v1/environments/{id}/network-log), as Logs does for its log: live on its
// node while it runs, the kept artifact once it ended. Each line is one
// JSON record (docs/nodes.md, "Network boundary").
func (s *Service) NetworkLog(ctx context.Context, p domain.Principal, id string) (Logs, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil {
		return Logs{}, err
	}
	out := Logs{Environment: e.ID, State: e.State}
	switch {
	case e.State == domain.StatePending || (e.State.Live() && e.Node == ""):
		return Logs{}, domain.Errorf(domain.CodeConflict, "environment %s is pending: its network log begins once a node claims it; ask again shortly", e.ID)
	case e.State.Live():
		n, err := s.store.GetNode(ctx, p.OrgID, e.Node)
		if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
			return Logs{}, err
		}
		if err != nil || n.State != domain.NodeActive {
			return Logs{}, domain.Errorf(domain.CodeConflict, "the node that runs environment %s is no longer active; the environment is about to fail", e.ID)
		}
		u := tunnel.NetLogURL(n.TunnelURL)
		if u == "" || len(n.TunnelKey) == 0 {
			return Logs{}, domain.Errorf(domain.CodeConflict, "node %s, which runs environment %s, serves no live logs: its agent registered without an endpoint", n.ID, e.ID)
		}
		exp := s.clock.Now().Add(LogTicketTTL).Truncate(time.Second).UTC()
		t, err := ticket.Sign(n.TunnelKey, ticket.Claims{Org: p.OrgID, Env: e.ID, Node: n.ID, Open: ticket.OpenNetLog, Exp: exp.Unix()})
		if err != nil {
			return Logs{}, domain.Internal(err)
		}
		out.Live = &LiveLog{URL: u, Ticket: t, Expires: exp}
		return out, nil
	}
	if e.NetworkLog == "" {
		return Logs{}, domain.Errorf(domain.CodeConflict, "environment %s is %s and its node kept no network log of it (its template's network is not open or rules, or the upload failed or is under way; ask again shortly)", e.ID, e.State)
	}
	kept, err := s.keptLog(ctx, p, e, "network log", e.NetworkLog)
	if err != nil {
		return Logs{}, err
	}
	out.Kept = kept
	return out, nil
}

func (s *Service) handleNetworkLog(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	for k := range r.URL.Query() {
		return domain.BadRequest(k, "unknown query parameter %q: since, offset and follow are the node's to apply", k)
	}
	l, err := s.NetworkLog(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusOK, l)
	return nil
}
