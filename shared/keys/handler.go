package keys

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// TokenRoutes is the tokens group: POST /v1/tokens, and the console's
// sign-in codes (asked for with a CLI token, exchanged by the page without
// one: the code is the credential).
func TokenRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/tokens", Access: httpapi.Member, Handler: s.handleCreateToken},
		{Method: http.MethodPost, Path: "/v1/console/codes", Access: httpapi.Member, Handler: s.handleCreateConsoleCode},
		{Method: http.MethodPost, Path: "/v1/console/sessions", Access: httpapi.Public, Handler: s.handleExchangeConsoleCode},
	}
}

// KeyRoutes is the keys group: create, list and revoke, and who the caller's
// own token is.
func KeyRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/keys", Access: httpapi.Admin, Handler: s.handleCreateKey},
		{Method: http.MethodGet, Path: "/v1/keys", Access: httpapi.Member, Handler: s.handleList},
		{Method: http.MethodDelete, Path: "/v1/keys/{id}", Access: httpapi.Member, Handler: s.handleRevoke},
		{Method: http.MethodGet, Path: "/v1/whoami", Access: httpapi.Member, Handler: s.handleWhoami},
	}
}

type createRequest struct {
	Name   string `json:"name"`
	Source string `json:"source,omitempty"`
	Grant
}

func (s *Service) handleCreateToken(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req createRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.CreateTokenWith(r.Context(), p, req.Name, req.Source, req.Grant)
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

type createKeyRequest struct {
	Name string `json:"name"`
	Grant
}

func (s *Service) handleCreateKey(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req createKeyRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.CreateOrgKeyWith(r.Context(), p, req.Name, req.Grant)
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	ks, err := s.List(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"keys": ks})
	return nil
}

func (s *Service) handleRevoke(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	k, err := s.Revoke(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"apiKey": k})
	return nil
}
