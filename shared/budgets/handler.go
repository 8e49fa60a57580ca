package budgets

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/usage"
)

// Routes is the budgets group. Members see the budgets and what is left of
// them; admins set and remove them.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/v1/budgets", Access: httpapi.Member, Handler: s.handleList},
		{Method: http.MethodPut, Path: "/v1/budgets/{id}", Access: httpapi.Admin, Handler: s.handlePut},
		{Method: http.MethodDelete, Path: "/v1/budgets/{id}", Access: httpapi.Admin, Handler: s.handleDelete},
	}
}

// PutRequest is the body of PUT /v1/budgets/{id}.
type PutRequest struct {
	Scope   string  `json:"scope"`
	Period  string  `json:"period"`
	Seconds int64   `json:"seconds"`
	Cost    float64 `json:"cost"`
	Hard    bool    `json:"hard"`
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	out, err := s.List(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Service) handlePut(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req PutRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	st, err := s.Put(r.Context(), p, usage.Budget{ID: r.PathValue("id"), Scope: req.Scope, Period: req.Period,
		Seconds: req.Seconds, Cost: req.Cost, Hard: req.Hard})
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"budget": st})
	return nil
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	if err := s.Delete(r.Context(), p, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
