package environments

import (
	"net/http"
	"slices"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Routes is the environments group.
func Routes(s *Service) []httpapi.Route {
	return slices.Concat([]httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/environments", Access: httpapi.Member, Handler: s.handleLease},
		{Method: http.MethodGet, Path: "/v1/environments", Access: httpapi.Member, Handler: s.handleList},
		{Method: http.MethodGet, Path: "/v1/environments/{id}", Access: httpapi.Member, Handler: s.handleGet},
		{Method: http.MethodDelete, Path: "/v1/environments/{id}", Access: httpapi.Member, Handler: s.handleDelete},
		{Method: http.MethodPost, Path: "/v1/environments/{id}/touch", Access: httpapi.Member, Handler: s.handleTouch},
		{Method: http.MethodPost, Path: "/v1/environments/{id}/tunnel", Access: httpapi.Member, Handler: s.handleTunnel},
		{Method: http.MethodPost, Path: "/v1/environments/{id}/exec", Access: httpapi.Member, Handler: s.handleExec},
		{Method: http.MethodPost, Path: "/v1/environments/{id}/files", Access: httpapi.Member, Handler: s.handleFiles},
		{Method: http.MethodGet, Path: "/v1/environments/{id}/logs", Access: httpapi.Member, Handler: s.handleLogs},
	}, checkpointRoutes(s), networkRoutes(s), previewRoutes(s), previewRouteRoutes(s), metricsRoutes(s), wakeRoutes(s))
}

func (s *Service) handleLease(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req LeaseRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	res, err := s.Lease(r.Context(), p, req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(res.Body) // the client went away; nothing useful to do
	return nil
}

// listBody is the body of GET /v1/environments.
type listBody struct {
	Environments []domain.Environment `json:"environments"`
	// Next is the cursor of the following page, absent on the last.
	Next string `json:"next,omitempty"`
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	pg, q, err := httpapi.ParsePage(r, MaxListLimit, "state")
	if err != nil {
		return err
	}
	eq := domain.EnvQuery{State: q.Get("state"), Cursor: pg.Cursor, Limit: pg.Limit}
	page, err := s.List(r.Context(), p, eq)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, listBody{Environments: page.Environments, Next: page.Next})
	return nil
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	wq, err := parseWait(r)
	if err != nil {
		return err
	}
	e, err := s.Wait(r.Context(), p, r.PathValue("id"), wq)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, e) // the environment itself (spec 4 row 5)
	return nil
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	e, err := s.Delete(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, e) // the environment itself, as GET returns it
	return nil
}

func (s *Service) handleTouch(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	// The endpoint takes no body; one that is not empty is refused, not ignored.
	var none struct{}
	if err := httpapi.DecodeOptional(r, &none); err != nil {
		return err
	}
	e, err := s.Touch(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, e) // the environment itself, as GET returns it
	return nil
}
