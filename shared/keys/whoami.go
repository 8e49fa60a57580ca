package keys

import (
	"context"
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Identity is who a bearer token acts as.
type Identity struct {
	Organization string `json:"organization"`
	// User is the person a CLI token acts as; empty for an organization key.
	User string      `json:"user"`
	Role domain.Role `json:"role"`
	// Key is the record of the token itself, so a client can name it and
	// revoke it.
	Key domain.APIKey `json:"key"`
}

// Whoami reads the caller's own key record. The role is the principal's,
// which authentication read moments ago, so it is the one in force.
func (s *Service) Whoami(ctx context.Context, p domain.Principal) (Identity, error) {
	k, err := s.store.GetKey(ctx, p.OrgID, p.KeyID)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Organization: p.OrgID, User: p.UserID, Role: p.Role, Key: k}, nil
}

// handleWhoami serves GET /v1/whoami. No other endpoint tells a caller who
// its token acts as (the listing of keys says neither which one is the
// caller's, nor the organization or role), and a client handed a token needs
// that to show it before using it.
func (s *Service) handleWhoami(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	id, err := s.Whoami(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, id)
	return nil
}
