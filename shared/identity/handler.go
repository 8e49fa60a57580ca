package identity

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// NodeEnvironments finds an environment the calling node runs
// (nodes.Service.RunningEnvironment): a node gets tokens for its own
// environments only.
type NodeEnvironments interface {
	RunningEnvironment(ctx context.Context, p domain.Principal, nodeID, envID string) (domain.Environment, error)
}

// Environments reads an environment for a person or key
// (environments.Service.Get), with its restrictions.
type Environments interface {
	Get(ctx context.Context, p domain.Principal, id string) (domain.Environment, error)
}

// Service serves the issuer's documents, nodes' tokens and the claims an
// environment's tokens carry.
type Service struct {
	issuer *Issuer
	nodes  NodeEnvironments
	envs   Environments
	log    *slog.Logger
}

// NewService is the identity group.
func NewService(is *Issuer, nodes NodeEnvironments, envs Environments) *Service {
	return &Service{issuer: is, nodes: nodes, envs: envs, log: slog.New(slog.DiscardHandler)}
}

// WithLogger logs every issue of tokens to l: which node, environment,
// audiences, token ids and expiry, for an auditor to follow a token
// (docs/identity.md).
func (s *Service) WithLogger(l *slog.Logger) *Service {
	s.log = l
	return s
}

// Routes are the identity group's routes (docs/identity.md).
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: DiscoveryPath, Access: httpapi.Public, Handler: s.handleDiscovery},
		{Method: http.MethodGet, Path: JWKSPath, Access: httpapi.Public, Handler: s.handleJWKS},
		{Method: http.MethodGet, Path: "/v1/environments/{id}/identity", Access: httpapi.Member, Handler: s.handleClaims},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/identity", Access: httpapi.Node, Handler: s.handleNodeTokens},
	}
}

// documentMaxAge is how long verifiers may cache the documents: well
// under the time a next key is published before it signs.
const documentMaxAge = "public, max-age=300"

func (s *Service) handleDiscovery(w http.ResponseWriter, r *http.Request, _ domain.Principal) error {
	w.Header().Set("Cache-Control", documentMaxAge)
	httpapi.WriteJSON(w, http.StatusOK, s.issuer.Discovery())
	return nil
}

func (s *Service) handleJWKS(w http.ResponseWriter, r *http.Request, _ domain.Principal) error {
	set, err := s.issuer.JWKS(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", documentMaxAge)
	httpapi.WriteJSON(w, http.StatusOK, set)
	return nil
}

// View is GET /v1/environments/{id}/identity: what an environment's tokens
// say, never a token. Claims are as a token issued now would carry them
// (its jti aside).
type View struct {
	Issuer   string          `json:"issuer"`
	Lifetime domain.Duration `json:"lifetime"`
	Tokens   []ViewToken     `json:"tokens"`
}

// ViewToken is one audience's token, described.
type ViewToken struct {
	Audience string `json:"audience"`
	// Path is the token's file inside the environment.
	Path   string `json:"path"`
	Claims Claims `json:"claims"`
}

// Describe is the view of an environment the caller may read.
func (s *Service) Describe(ctx context.Context, p domain.Principal, id string) (View, error) {
	e, err := s.envs.Get(ctx, p, id)
	if err != nil {
		return View{}, err
	}
	if e.Identity == nil {
		return View{}, domain.Errorf(domain.CodeNotFound, "environment %s has no identity: its template asks for none", e.ID)
	}
	now := s.issuer.clock.Now()
	v := View{Issuer: s.issuer.URL(), Lifetime: domain.Duration(e.Identity.LifetimeOrDefault()), Tokens: []ViewToken{}}
	for _, aud := range e.Identity.Audiences {
		v.Tokens = append(v.Tokens, ViewToken{Audience: aud, Path: TokenPath(aud), Claims: ClaimsFor(s.issuer.URL(), e, aud, now, "")})
	}
	return v, nil
}

func (s *Service) handleClaims(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	v, err := s.Describe(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, v)
	return nil
}

// NodeTokens is the answer to a node: a token per audience, and when to
// ask again (at 80% of their life, as Kubernetes refreshes projected
// service-account tokens).
type NodeTokens struct {
	Tokens  []Token   `json:"tokens"`
	Refresh time.Time `json:"refresh"`
}

// ForNode signs the tokens of an environment the calling node runs.
func (s *Service) ForNode(ctx context.Context, p domain.Principal, nodeID, envID string) (NodeTokens, error) {
	e, err := s.nodes.RunningEnvironment(ctx, p, nodeID, envID)
	if err != nil {
		return NodeTokens{}, err
	}
	toks, err := s.Tokens(ctx, e)
	if err != nil {
		return NodeTokens{}, err
	}
	for _, t := range toks.Tokens {
		s.log.Info("identity token issued", "org", e.OrgID, "environment", e.ID, "node", nodeID, "audience", t.Audience,
			"jti", t.ID, "expires", t.Expires, "sub", Subject(e.OrgID, e.Template, e.Project))
	}
	return toks, nil
}

// Tokens are e's tokens with their refresh time.
func (s *Service) Tokens(ctx context.Context, e domain.Environment) (NodeTokens, error) {
	now := s.issuer.clock.Now()
	toks, err := s.issuer.Tokens(ctx, e)
	if err != nil {
		return NodeTokens{}, err
	}
	return NodeTokens{Tokens: toks, Refresh: now.Add(RefreshAfter(e.Identity.LifetimeOrDefault()))}, nil
}

// RefreshAfter is how long after issue a token is replaced: at 80% of its
// lifetime.
func RefreshAfter(life time.Duration) time.Duration { return life * 4 / 5 }

func (s *Service) handleNodeTokens(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req struct{}
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	out, err := s.ForNode(r.Context(), p, r.PathValue("id"), r.PathValue("env"))
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusOK, out)
	return nil
}
