package nodes

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Routes is the nodes group. Issuing credentials and listing nodes are an
// admin's; everything else takes a node credential (httpapi.Node), which
// can do nothing but this.
func Routes(s *Service) []httpapi.Route {
	return append([]httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/nodes/credentials", Access: httpapi.Admin, Handler: s.handleIssue},
		{Method: http.MethodGet, Path: "/v1/nodes", Access: httpapi.Admin, Handler: s.handleList},
		{Method: http.MethodPost, Path: "/v1/nodes", Access: httpapi.Node, Handler: s.handleRegister},
		{Method: http.MethodDelete, Path: "/v1/nodes/{id}", Access: httpapi.Node, Handler: s.handleDeregister},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/heartbeat", Access: httpapi.Node, Handler: s.handleHeartbeat},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/claim", Access: httpapi.Node, Handler: s.handleClaim},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/report", Access: httpapi.Node, Handler: s.handleReport},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/log", Access: httpapi.Node, Handler: s.handleLog},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/log/complete", Access: httpapi.Node, Handler: s.handleLogComplete},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/network-refused", Access: httpapi.Node, Handler: s.handleRefusals},
		{Method: http.MethodGet, Path: "/v1/nodes/{id}/environments/{env}/secrets", Access: httpapi.Node, Handler: s.handleSecrets},
	}, checkpointRoutes(s)...)
}

type issueRequest struct {
	Pool string `json:"pool"`
	Name string `json:"name"`
}

func (s *Service) handleIssue(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req issueRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.IssueCredential(r.Context(), p, req.Pool, req.Name)
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	if err := noQuery(r); err != nil {
		return err
	}
	ns, err := s.List(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"nodes": ns})
	return nil
}

func (s *Service) handleRegister(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req RegisterRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.Register(r.Context(), p, req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/nodes/"+out.Node.ID)
	// The answer carries the node's tunnel key.
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

func (s *Service) handleDeregister(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	n, err := s.Deregister(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"node": n})
	return nil
}

type heartbeatRequest struct {
	// Environments are the ids the node runs now.
	Environments []string `json:"environments"`
	// Active are the environments that were active on the node (what
	// their templates count as activity) since the node last said so.
	Active []string `json:"active"`
	// Opened are the preview links opened since the last heartbeat.
	Opened []PreviewOpened `json:"opened"`
}

func (s *Service) handleHeartbeat(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req heartbeatRequest
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	out, err := s.Heartbeat(r.Context(), p, r.PathValue("id"), req.Environments)
	if err != nil {
		return err
	}
	if err := s.previewActivity(r.Context(), out.Node, req.Active, req.Opened); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// handleClaim long-polls: ?wait= (a duration, default and at most
// MaxClaimWait) bounds it. 200 carries a claimed environment; 204 says
// nothing was pending: claim again.
func (s *Service) handleClaim(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	q := r.URL.Query()
	for k := range q {
		if k != "wait" {
			return domain.BadRequest(k, "unknown query parameter %q; claim takes wait", k)
		}
	}
	wait := MaxClaimWait
	if v := q.Get("wait"); v != "" {
		d, err := domain.ParseDuration(v)
		if err != nil || d < 0 {
			return domain.BadRequest("wait", "wait must be a duration from 0s to %s", domain.Duration(MaxClaimWait))
		}
		wait = d.Std()
	}
	var req struct{}
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	c, err := s.Claim(r.Context(), p, r.PathValue("id"), wait)
	if err != nil {
		return err
	}
	if c == nil {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	// The snapshot link is a credential for a while.
	httpapi.WriteSecret(w, http.StatusOK, c)
	return nil
}

func (s *Service) handleReport(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req Report
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	e, err := s.ReportState(r.Context(), p, r.PathValue("id"), r.PathValue("env"), req)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"environment": e})
	return nil
}

func noQuery(r *http.Request) error {
	for k := range r.URL.Query() {
		return domain.BadRequest(k, "unknown query parameter %q", k)
	}
	return nil
}
