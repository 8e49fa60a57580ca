package usage

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Routes is the usage group: GET /v1/usage (by, filter, since, until), the
// usage settings (groupings, currency, rates) and budgets.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/v1/usage", Access: httpapi.Member, Handler: s.handleUsage},
		{Method: http.MethodGet, Path: "/v1/usage/settings", Access: httpapi.Member, Handler: s.handleGetSettings},
		{Method: http.MethodPut, Path: "/v1/usage/settings", Access: httpapi.Admin, Handler: s.handlePutSettings},
	}
}

// usageParams are the query parameters of GET /v1/usage.
var usageParams = map[string]bool{"since": true, "until": true, "by": true, "filter": true}

func (s *Service) handleUsage(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	q := r.URL.Query()
	for name, vs := range q {
		if !usageParams[name] {
			return domain.BadRequest(name, "unknown query parameter %q; this endpoint takes since, until (YYYY-MM-DD), by and filter", name)
		}
		if len(vs) != 1 || vs[0] == "" {
			if name == "since" {
				return domain.BadRequest(name, "since must be given once, as YYYY-MM-DD; leave it out for the last %d days", DefaultDays)
			}
			return domain.BadRequest(name, "%s must be given once, not empty", name)
		}
	}
	rep, err := s.Query(r.Context(), p, Query{Since: q.Get("since"), Until: q.Get("until"), By: q.Get("by"), Filter: q.Get("filter")})
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, rep)
	return nil
}

func (s *Service) handleGetSettings(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	set, err := s.Settings(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"settings": set})
	return nil
}

func (s *Service) handlePutSettings(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var in Settings
	if err := httpapi.Decode(r, &in); err != nil {
		return err
	}
	set, err := s.PutSettings(r.Context(), p, in)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"settings": set})
	return nil
}
