package environments

import (
	"context"
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// networkRoutes are an environment's network: its log of connections.
func networkRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/v1/environments/{id}/network-log", Access: httpapi.Member, Handler: s.handleNetworkLog},
		{Method: http.MethodPatch, Path: "/v1/environments/{id}/network", Access: httpapi.Member, Handler: s.handleSetNetwork},
	}
}

// NetworkPatch is the body of PATCH /v1/environments/{id}/network: each
// list present replaces the environment's own (an empty list clears it),
// each absent one is kept.
type NetworkPatch struct {
	Allow *[]string `json:"allow"`
	Deny  *[]string `json:"deny"`
}

// networkTeller pushes an environment's network layer to its node
// (nodes.Stopper).
type networkTeller interface {
	TellNetwork(ctx context.Context, e domain.Environment)
}

// SetNetwork replaces a live environment's own network layer (its
// template's policy stays, and a connection needs both) and pushes it to
// its node, which decides new connections by it at once and closes the
// open ones it refuses. Entries are checked as a template's are (422 naming
// the entry); only an environment of a template with network open or
// rules has rules.
func (s *Service) SetNetwork(ctx context.Context, p domain.Principal, id string, patch NetworkPatch) (domain.Environment, error) {
	cs, ok := s.store.(checkpointStore)
	if !ok {
		return domain.Environment{}, domain.Errorf(domain.CodeUnavailable, "network rules cannot be changed here")
	}
	now := s.clock.Now()
	e, err := s.getActing(ctx, p, id)
	for try := 0; err == nil; try++ {
		if !e.State.Live() {
			return domain.Environment{}, domain.Errorf(domain.CodeConflict, "environment %s is %s: only a live environment's network rules can change", e.ID, e.State)
		}
		if try == 5 {
			return domain.Environment{}, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry", e.ID)
		}
		t, terr := s.template(ctx, p.OrgID, e.Template, now)
		if terr != nil {
			return domain.Environment{}, terr
		}
		var n domain.EnvNetwork
		if e.Network != nil {
			n = *e.Network
		}
		if patch.Allow != nil {
			n.Allow = *patch.Allow
		}
		if patch.Deny != nil {
			n.Deny = *patch.Deny
		}
		if err := domain.ValidateEnvNetwork("network", t, n); err != nil {
			return domain.Environment{}, err
		}
		n = n.Normalized()
		// The version of the record this write makes: nodes report the one
		// they apply, and are sent the layer again while it is older.
		n.Version = e.Version + 1
		after := e
		after.Network = &n
		var done bool
		if e, done, err = cs.ReplaceEnvironment(ctx, e, after); err == nil && done {
			if nt, ok := s.stopper.(networkTeller); ok {
				tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offerTimeout)
				nt.TellNetwork(tctx, e)
				cancel()
			}
			return e, nil
		}
	}
	return domain.Environment{}, err
}

func (s *Service) handleSetNetwork(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var patch NetworkPatch
	if err := httpapi.Decode(r, &patch); err != nil {
		return err
	}
	e, err := s.SetNetwork(r.Context(), p, r.PathValue("id"), patch)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"environment": e})
	return nil
}

// NetworkLog says where an environment's network log is (GET
// /v1/environments/{id}/network-log), as Logs does for its log: live on its
// node while it runs, the kept artifact once it ended. Each line is one
// JSON record (docs/nodes.md, "Network boundary").
func (s *Service) NetworkLog(ctx context.Context, p domain.Principal, id string) (Logs, error) {
	return s.whereLog(ctx, p, id, envNetLog)
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
