package usage

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Routes is the usage group: GET /v1/usage?since=YYYY-MM-DD.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{{Method: http.MethodGet, Path: "/v1/usage", Access: httpapi.Member, Handler: s.handleUsage}}
}

func (s *Service) handleUsage(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	q := r.URL.Query()
	for name, vs := range q {
		if name != "since" {
			return domain.BadRequest(name, "unknown query parameter %q; this endpoint takes since=YYYY-MM-DD", name)
		}
		if len(vs) != 1 || vs[0] == "" {
			return domain.BadRequest(name, "since must be given once, as YYYY-MM-DD; leave it out for the last %d days", DefaultDays)
		}
	}
	rep, err := s.Usage(r.Context(), p, q.Get("since"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, rep)
	return nil
}
