package federation

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Routes are the exchange (public: the identity token is the credential)
// and the trusted issuers (admins).
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/tokens/exchange", Access: httpapi.Public, Handler: s.handleExchange},
		{Method: http.MethodPost, Path: "/v1/issuers", Access: httpapi.Admin, Handler: s.handleRegister},
		{Method: http.MethodGet, Path: "/v1/issuers", Access: httpapi.Admin, Handler: s.handleList},
		{Method: http.MethodDelete, Path: "/v1/issuers/{id}", Access: httpapi.Admin, Handler: s.handleDelete},
	}
}

func (s *Service) handleExchange(w http.ResponseWriter, r *http.Request, _ domain.Principal) error {
	var req ExchangeRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.Exchange(r.Context(), req, httpapi.PeerAddr(r))
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

func (s *Service) handleRegister(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req domain.IssuerRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	is, err := s.Register(r.Context(), p, req)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, map[string]any{"issuer": is})
	return nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	out, err := s.List(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"issuers": out})
	return nil
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	if err := s.Delete(r.Context(), p, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
