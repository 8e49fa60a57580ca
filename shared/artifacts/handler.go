package artifacts

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Routes is the artifacts group.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/artifacts", Access: httpapi.Member, Handler: s.handleCreate},
		{Method: http.MethodGet, Path: "/v1/artifacts", Access: httpapi.Member, Handler: s.handleList},
		{Method: http.MethodGet, Path: "/v1/artifacts/{id}", Access: httpapi.Member, Handler: s.handleGet},
		{Method: http.MethodPost, Path: "/v1/artifacts/{id}/upload", Access: httpapi.Member, Handler: s.handleUpload},
		{Method: http.MethodPost, Path: "/v1/artifacts/{id}/complete", Access: httpapi.Member, Handler: s.handleComplete},
		{Method: http.MethodPost, Path: "/v1/artifacts/{id}/links", Access: httpapi.Member, Handler: s.handleLink},
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
	// The upload URLs are credentials for a while; no cache may keep them.
	w.Header().Set("Location", "/v1/artifacts/"+out.Artifact.ID)
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

type listResponse struct {
	Artifacts []domain.Artifact `json:"artifacts"`
	// Next is the cursor of the following page, absent on the last one.
	Next string `json:"next,omitempty"`
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	// Pagination reads like the environments list: `limit`, and the `next`
	// of the previous page sent back as `cursor`.
	pg, _, err := httpapi.ParsePage(r, MaxListLimit)
	if err != nil {
		return err
	}
	items, next, err := s.List(r.Context(), p, pg.Limit, pg.Cursor)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, listResponse{Artifacts: items, Next: next})
	return nil
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	a, err := s.Get(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, a)
	return nil
}

// uploadRequest is the (empty) body of POST /v1/artifacts/{id}/upload: the
// layout was declared at create time and cannot change. An empty object is
// accepted, any field is 400.
type uploadRequest struct{}

// handleUpload answers 200, not 201: nothing is created, the URLs are
// signatures (the record only learns when they stop working).
func (s *Service) handleUpload(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req uploadRequest
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	out, err := s.Upload(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The upload URLs are credentials for a while; no cache may keep them.
	httpapi.WriteSecret(w, http.StatusOK, out)
	return nil
}

type completeRequest struct {
	Parts []CompletedPart `json:"parts,omitempty"`
}

func (s *Service) handleComplete(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req completeRequest
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	a, err := s.Complete(r.Context(), p, r.PathValue("id"), req.Parts)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, a)
	return nil
}

type linkRequest struct {
	Expires string `json:"expires"`
}

// handleLink answers 200, not 201: nothing is stored, the link is a signature.
func (s *Service) handleLink(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req linkRequest
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	link, err := s.Link(r.Context(), p, r.PathValue("id"), req.Expires)
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusOK, link)
	return nil
}
