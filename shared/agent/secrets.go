package agent

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/url"
	"sync"

	"github.com/envlease/envlease/shared/agent/netstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// envSecrets holds the values of the secrets an environment's template
// binds, in the agent's memory only (docs/secrets.md): fetched with the
// node's credential for an environment this node claimed, handed to its
// network boundary, and dropped when it ends. Never written to a file, a
// log, a checkpoint or a record.
type envSecrets struct {
	mu   sync.Mutex
	vals map[string]string
}

func (s *envSecrets) set(v map[string]string) {
	s.mu.Lock()
	s.vals = v
	s.mu.Unlock()
}

func (s *envSecrets) value(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vals[name]
	return v, ok
}

// Secrets fetches the values of the secrets environment env's template
// binds; only for an environment the node runs.
func (c *Client) Secrets(ctx context.Context, node, env string) (map[string]string, error) {
	var out nodes.EnvSecrets
	_, err := c.do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(node)+"/environments/"+url.PathEscape(env)+"/secrets", nil, &out)
	return out.Secrets, err
}

// fetchSecrets gets r's secrets before its environment starts, when its
// template binds any; the boundary finds them by the environment's id.
func (a *Agent) fetchSecrets(ctx context.Context, node string, r *runningEnv, t domain.Template) error {
	if len(t.Secrets) == 0 {
		return nil
	}
	vals, err := a.api.Secrets(ctx, node, r.id)
	if err != nil {
		return err
	}
	r.secrets.set(vals)
	return nil
}

// boundarySecrets is what environment id's boundary adds: t's bindings,
// with values from holder (filled once the environment's claim fetched
// them).
func boundarySecrets(t domain.Template, holder *envSecrets, roots *x509.CertPool) *netstack.Secrets {
	if len(t.Secrets) == 0 {
		return nil
	}
	s := &netstack.Secrets{Value: holder.value, Roots: roots}
	for _, b := range t.Secrets {
		nb := netstack.SecretBinding{Secret: b.Secret, Hosts: b.Hosts}
		if b.BasicAuth != nil {
			nb.BasicUser = b.BasicAuth.User
		} else {
			nb.Header, nb.Value = b.HeaderParts()
		}
		s.Bindings = append(s.Bindings, nb)
	}
	return s
}
