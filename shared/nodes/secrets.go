package nodes

import (
	"context"
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// SecretOpener opens the secrets a template binds (secrets.Service).
type SecretOpener interface {
	Open(ctx context.Context, org string, t domain.Template) (map[string]string, error)
}

// EnvSecrets is the answer of GET /v1/nodes/{id}/environments/{env}/secrets:
// the values of the secrets the environment's template binds, by name, for
// its network boundary to add (docs/secrets.md). The agent holds them in
// memory only.
type EnvSecrets struct {
	Secrets map[string]string `json:"secrets"`
}

// Secrets opens the secrets of an environment the calling node runs and
// that is live: a node reaches no other environment's, and none once the
// environment ended.
func (s *Service) Secrets(ctx context.Context, p domain.Principal, nodeID, envID string) (EnvSecrets, error) {
	if s.opt.Secrets == nil {
		return EnvSecrets{}, domain.Errorf(domain.CodeConflict, "this API holds no secrets")
	}
	n, e, err := s.nodeEnv(ctx, p, nodeID, envID)
	if err != nil {
		return EnvSecrets{}, err
	}
	if !e.State.Live() {
		return EnvSecrets{}, domain.Errorf(domain.CodeGone, "environment %s is %s", e.ID, e.State)
	}
	t, err := s.store.GetTemplate(ctx, n.OrgID, e.Template)
	if err != nil {
		return EnvSecrets{}, err
	}
	vals, err := s.opt.Secrets.Open(ctx, n.OrgID, t)
	if err != nil {
		return EnvSecrets{}, err
	}
	return EnvSecrets{Secrets: vals}, nil
}

func (s *Service) handleSecrets(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	out, err := s.Secrets(r.Context(), p, r.PathValue("id"), r.PathValue("env"))
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusOK, out)
	return nil
}
