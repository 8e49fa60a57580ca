package nodes

import (
	"context"
	"net/http"
	"strings"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// MaxLogSize bounds a kept log: one upload of one part, whatever the
// artifacts' part size: the most an agent keeps (its -log-max, at most
// 32 MiB; 16 MiB by default) and the lines that say where it was cut.
const MaxLogSize = 32<<20 + 64<<10

// LogArtifacts makes the artifacts that keep environments' logs
// (artifacts.Service). The service's Linker is asked for it, so every
// wiring that lets nodes download artifacts lets them keep logs too.
type LogArtifacts interface {
	Create(ctx context.Context, p domain.Principal, req artifacts.CreateRequest) (artifacts.Created, error)
	Complete(ctx context.Context, p domain.Principal, id string, parts []artifacts.CompletedPart) (domain.Artifact, error)
	PartSize() int64
}

// LogRequest is the body of POST /v1/nodes/{id}/environments/{env}/log: the
// kept log's size and SHA-256 (hex). A node keeps an environment's log by
// asking for an artifact of its organization (linked from the environment
// at once), uploading the bytes with the presigned request, and completing
// it (POST .../log/complete). See docs/api.md, "Logs".
type LogRequest struct {
	Size   *int64 `json:"size"`
	SHA256 string `json:"sha256"`
}

func (s *Service) logArtifacts() (LogArtifacts, error) {
	la, ok := s.links.(LogArtifacts)
	if !ok {
		return nil, domain.Errorf(domain.CodeConflict, "this API keeps no logs: it has no artifact store")
	}
	return la, nil
}

// nodeEnv is an environment the calling node runs or ran.
func (s *Service) nodeEnv(ctx context.Context, p domain.Principal, nodeID, envID string) (domain.Node, domain.Environment, error) {
	n, err := s.ownNode(ctx, p, nodeID)
	if err != nil {
		return n, domain.Environment{}, err
	}
	if !strings.HasPrefix(envID, "env_") || len(envID) > 64 || strings.ContainsAny(envID, "#/ ") {
		return n, domain.Environment{}, domain.NotFound("environment")
	}
	e, err := s.store.GetEnvironment(ctx, n.OrgID, envID)
	if err != nil {
		return n, e, err
	}
	if e.Node != n.ID {
		return n, e, domain.Errorf(domain.CodeConflict, "environment %s is not run by node %s", e.ID, n.ID)
	}
	return n, e, nil
}

// KeepLog makes the artifact that keeps an environment's log, links it from
// the environment and answers with its upload. A second call replaces the
// link (an agent that lost the first answer); the first artifact is left
// to its expiry.
func (s *Service) KeepLog(ctx context.Context, p domain.Principal, nodeID, envID string, req LogRequest) (artifacts.Created, error) {
	return s.keepLog(ctx, p, nodeID, envID, req, envLog)
}

func (s *Service) keepLog(ctx context.Context, p domain.Principal, nodeID, envID string, req LogRequest, kind logKind) (artifacts.Created, error) {
	la, err := s.logArtifacts()
	if err != nil {
		return artifacts.Created{}, err
	}
	if req.Size == nil || *req.Size < 0 || *req.Size > min(MaxLogSize, la.PartSize()) {
		return artifacts.Created{}, domain.Invalid("size", "size must be between 0 and %d bytes", min(MaxLogSize, la.PartSize()))
	}
	n, e, err := s.nodeEnv(ctx, p, nodeID, envID)
	if err != nil {
		return artifacts.Created{}, err
	}
	if e.State == domain.StatePending {
		return artifacts.Created{}, domain.Errorf(domain.CodeConflict, "environment %s is pending: it has no log yet", e.ID)
	}
	owner := domain.Principal{OrgID: n.OrgID, KeyID: p.KeyID}
	c, err := la.Create(ctx, owner, artifacts.CreateRequest{
		Name: kind.name + " of " + e.ID, Project: e.Project, ContentType: kind.contentType,
		Labels: map[string]string{"environment": e.ID}, Size: req.Size, SHA256: req.SHA256,
	})
	if err != nil {
		return artifacts.Created{}, err
	}
	for try := 0; try < attempts; try++ {
		next := e
		*kind.field(&next) = c.Artifact.ID
		after, done, err := s.store.ReplaceEnvironment(ctx, e, next)
		if err != nil {
			return artifacts.Created{}, err
		}
		if done {
			return c, nil
		}
		e = after
	}
	return artifacts.Created{}, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry", e.ID)
}

// CompleteLog seals the environment's log artifact once uploaded.
func (s *Service) CompleteLog(ctx context.Context, p domain.Principal, nodeID, envID string) (domain.Artifact, error) {
	return s.completeLog(ctx, p, nodeID, envID, envLog)
}

func (s *Service) completeLog(ctx context.Context, p domain.Principal, nodeID, envID string, kind logKind) (domain.Artifact, error) {
	la, err := s.logArtifacts()
	if err != nil {
		return domain.Artifact{}, err
	}
	n, e, err := s.nodeEnv(ctx, p, nodeID, envID)
	if err != nil {
		return domain.Artifact{}, err
	}
	id := *kind.field(&e)
	if id == "" {
		return domain.Artifact{}, domain.Errorf(domain.CodeConflict, "environment %s has no %s artifact: ask for one first", e.ID, kind.name)
	}
	return la.Complete(ctx, domain.Principal{OrgID: n.OrgID, KeyID: p.KeyID}, id, nil)
}

func (s *Service) handleLog(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req LogRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	kind, err := logKindOf(r)
	if err != nil {
		return err
	}
	c, err := s.keepLog(r.Context(), p, r.PathValue("id"), r.PathValue("env"), req, kind)
	if err != nil {
		return err
	}
	// The upload requests are credentials for a while.
	httpapi.WriteSecret(w, http.StatusCreated, c)
	return nil
}

func (s *Service) handleLogComplete(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var none struct{}
	if err := httpapi.DecodeOptional(r, &none); err != nil {
		return err
	}
	kind, err := logKindOf(r)
	if err != nil {
		return err
	}
	a, err := s.completeLog(r.Context(), p, r.PathValue("id"), r.PathValue("env"), kind)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"artifact": a})
	return nil
}

// RunningEnvironment is an environment the calling node runs now
// (starting or ready): what it may fetch an identity's tokens for
// (identity.Service).
func (s *Service) RunningEnvironment(ctx context.Context, p domain.Principal, nodeID, envID string) (domain.Environment, error) {
	_, e, err := s.nodeEnv(ctx, p, nodeID, envID)
	if err != nil {
		return e, err
	}
	if e.State != domain.StateStarting && e.State != domain.StateReady {
		return domain.Environment{}, domain.Errorf(domain.CodeConflict, "environment %s is %s: only a running environment has tokens", e.ID, e.State)
	}
	return e, nil
}
