package environments

import (
	"context"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// TunnelTicketTTL is the life of a tunnel ticket. Short, since the agent
// checks it offline and cannot hear of a revocation; a client renews it
// while it forwards.
const TunnelTicketTTL = 5 * time.Minute

// Tunnel is the answer to POST /v1/environments/{id}/tunnel: where the node
// serves tunnels, and a ticket that opens one to the environment's exports.
type Tunnel struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
}

// TicketHeir is what a tunnel ticket carries of its maker: it opens a
// tunnel to an environment the maker was just checked to reach
// (environments:lease, its restrictions), and ends no later than a limited
// maker.
var TicketHeir = auth.Heir{What: "a tunnel ticket", ActsWith: []string{domain.ScopeEnvLease}, RestrictionsChecked: true}

// Tunnel issues a ticket for a ready environment of the caller's
// organization, signed with the key of the node that runs it. It costs the
// environment's read and the node's.
func (s *Service) Tunnel(ctx context.Context, p domain.Principal, id string) (Tunnel, error) {
	// A paused environment wakes for the tunnel (pause.go).
	e, err := s.getWoken(ctx, p, id)
	if err != nil {
		return Tunnel{}, err
	}
	switch {
	case e.State == domain.StatePending || e.State == domain.StateStarting:
		return Tunnel{}, domain.Errorf(domain.CodeConflict, "environment %s is %s: a tunnel opens once it is ready; wait for it and ask again", e.ID, e.State)
	case e.State != domain.StateReady || e.Node == "":
		return Tunnel{}, domain.Errorf(domain.CodeConflict, "environment %s is %s: it no longer runs, so there is nothing to tunnel to", e.ID, e.State)
	}
	targets := make([]string, 0, len(e.Exports))
	for _, x := range e.Exports {
		if x.Target != "" {
			targets = append(targets, x.Target)
		}
	}
	if len(targets) == 0 {
		return Tunnel{}, domain.Errorf(domain.CodeConflict, "environment %s has no exports: there is nothing to tunnel to", e.ID)
	}
	n, err := s.store.GetNode(ctx, p.OrgID, e.Node)
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return Tunnel{}, err
	}
	if err != nil || n.State != domain.NodeActive {
		return Tunnel{}, domain.Errorf(domain.CodeConflict, "the node that runs environment %s is no longer active; the environment is about to fail", e.ID)
	}
	if n.TunnelURL == "" || len(n.TunnelKey) == 0 {
		return Tunnel{}, domain.Errorf(domain.CodeConflict, "node %s, which runs environment %s, serves no tunnels: its agent registered without a tunnel endpoint (an older agent, or one started with -no-tunnel)", n.ID, e.ID)
	}
	exp := s.clock.Now().Add(TunnelTicketTTL)
	lim, err := auth.Inherit(p, TicketHeir, auth.Limits{Expires: &exp})
	if err != nil {
		return Tunnel{}, err
	}
	exp = lim.Expires.Truncate(time.Second).UTC()
	t, err := ticket.Sign(n.TunnelKey, ticket.Claims{Org: p.OrgID, Env: e.ID, Node: n.ID, Targets: targets, Exp: exp.Unix()})
	if err != nil {
		return Tunnel{}, domain.Internal(err)
	}
	return Tunnel{URL: n.TunnelURL, Ticket: t, Expires: exp}, nil
}

func (s *Service) handleTunnel(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var none struct{}
	if err := httpapi.DecodeOptional(r, &none); err != nil {
		return err
	}
	t, err := s.Tunnel(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The ticket opens the tunnel to whoever holds it until it expires.
	httpapi.WriteSecret(w, http.StatusOK, t)
	return nil
}
