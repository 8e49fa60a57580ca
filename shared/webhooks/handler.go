package webhooks

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Routes is the webhooks group: admins manage webhooks and see their deliveries.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/webhooks", Access: httpapi.Admin, Handler: s.handleCreate},
		{Method: http.MethodGet, Path: "/v1/webhooks", Access: httpapi.Admin, Handler: s.handleList},
		{Method: http.MethodDelete, Path: "/v1/webhooks/{id}", Access: httpapi.Admin, Handler: s.handleDelete},
		{Method: http.MethodGet, Path: "/v1/webhooks/{id}/deliveries", Access: httpapi.Admin, Handler: s.handleDeliveries},
		{Method: http.MethodPost, Path: "/v1/webhooks/{id}/deliveries/{delivery}/retry", Access: httpapi.Admin, Handler: s.handleRetry},
	}
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req CreateRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.Create(r.Context(), p, req)
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	hs, err := s.List(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"webhooks": hs})
	return nil
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	if err := s.Delete(r.Context(), p, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Service) handleDeliveries(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	pg, _, err := httpapi.ParsePage(r, 100)
	if err != nil {
		return err
	}
	out, err := s.Deliveries(r.Context(), p, r.PathValue("id"), pg.Limit, pg.Cursor)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Service) handleRetry(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	d, err := s.Retry(r.Context(), p, r.PathValue("id"), r.PathValue("delivery"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"delivery": d})
	return nil
}
