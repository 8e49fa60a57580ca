// Package keys issues and manages bearer credentials: CLI tokens (endpoint 1),
// organization API keys (endpoint 2), their listing and revocation.
package keys

import (
	"context"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// Store is what the keys service needs from persistence.
type Store interface {
	// auth.Store's failed-attempt block also covers the exchange of
	// console sign-in codes.
	auth.Store
	PutKey(ctx context.Context, k domain.APIKey) error
	ListKeys(ctx context.Context, org string) ([]domain.APIKey, error)
	GetKey(ctx context.Context, org, id string) (domain.APIKey, error)
	RevokeKey(ctx context.Context, k domain.APIKey, now time.Time) (domain.APIKey, error)
	PutConsoleCode(ctx context.Context, c domain.ConsoleCode) error
	GetConsoleCode(ctx context.Context, hash string) (domain.ConsoleCode, error)
	ExchangeConsoleCode(ctx context.Context, c domain.ConsoleCode, k domain.APIKey, now time.Time) error
}

// Sources of a key record.
var sources = map[string]bool{"console": true, "cli": true, "api": true}

// ConnectionCloser ends what a revoked credential holds open: the node
// protocol connections of a node credential (nodes.Revocations).
type ConnectionCloser interface {
	CloseConnections(ctx context.Context, k domain.APIKey) error
}

// Service holds the key rules.
type Service struct {
	store  Store
	clock  clock.Clock
	closer ConnectionCloser
	// orgs reads the organization's token lifetime cap when the store
	// can (every real store); nil means no cap.
	orgs OrgReader
}

// Option configures the keys service.
type Option func(*Service)

// WithConnectionCloser makes revoking a node credential close its open
// node protocol connections (the functions that revoke have the WebSocket
// API's management endpoint; without it, connections are cut only at their
// next message).
func WithConnectionCloser(c ConnectionCloser) Option {
	return func(s *Service) { s.closer = c }
}

// NewService returns the keys service.
func NewService(store Store, clk clock.Clock, opts ...Option) *Service {
	s := &Service{store: store, clock: clk}
	if o, ok := store.(OrgReader); ok {
		s.orgs = o
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Issued is a new key record with its token, which is shown only this once.
type Issued struct {
	Token  string        `json:"token"`
	APIKey domain.APIKey `json:"apiKey"`
}

// CreateToken issues a CLI token that acts as the calling person.
func (s *Service) CreateToken(ctx context.Context, p domain.Principal, name, source string) (Issued, error) {
	return s.CreateTokenWith(ctx, p, name, source, Grant{})
}

// CreateTokenWith issues a CLI token limited by g.
func (s *Service) CreateTokenWith(ctx context.Context, p domain.Principal, name, source string, g Grant) (Issued, error) {
	if p.UserID == "" {
		return Issued{}, domain.Errorf(domain.CodeForbidden, "a CLI token belongs to a person; an organization API key cannot create one")
	}
	if source == "" {
		source = "cli"
	}
	if !sources[source] {
		return Issued{}, domain.Invalid("source", "source must be one of console, cli, api")
	}
	return s.issue(ctx, p, name, source, auth.PrefixCLI, g, domain.APIKey{
		Credential: domain.CredentialCLI, UserID: p.UserID, Role: p.Role,
		Owner: domain.Owner{Kind: "user", ID: p.UserID},
	})
}

// CreateOrgKey issues an organization API key. Admins only.
func (s *Service) CreateOrgKey(ctx context.Context, p domain.Principal, name string) (Issued, error) {
	return s.CreateOrgKeyWith(ctx, p, name, Grant{})
}

// CreateOrgKeyWith issues an organization API key limited by g. Admins only.
func (s *Service) CreateOrgKeyWith(ctx context.Context, p domain.Principal, name string, g Grant) (Issued, error) {
	if !p.IsAdmin() {
		return Issued{}, domain.Errorf(domain.CodeForbidden, "only an organization admin can create API keys")
	}
	// An organization key acts with member rights: it can use the service but
	// not manage credentials, which stays a person's act.
	return s.issue(ctx, p, name, "api", auth.PrefixOrg, g, domain.APIKey{
		Credential: domain.CredentialOrg, Role: domain.RoleMember,
		Owner: domain.Owner{Kind: "organization", ID: p.OrgID},
	})
}

func (s *Service) issue(ctx context.Context, p domain.Principal, name, source, prefix string, g Grant, k domain.APIKey) (Issued, error) {
	if err := ValidateName(name); err != nil {
		return Issued{}, err
	}
	now := s.clock.Now()
	if err := s.applyGrant(ctx, p, k.Role, g, now, &k); err != nil {
		return Issued{}, err
	}
	token, k := NewKey(p, name, source, prefix, k, now)
	if err := s.store.PutKey(ctx, k); err != nil {
		return Issued{}, err
	}
	return Issued{Token: token, APIKey: k}, nil
}

// NewKey draws a token of the given kind prefix and completes k, which says
// whose credential it is, into the record that stores its hash. Every kind of
// credential (CLI token, organization key, node credential) is made here.
func NewKey(p domain.Principal, name, source, prefix string, k domain.APIKey, now time.Time) (string, domain.APIKey) {
	token, display, hash := auth.NewToken(prefix)
	k.ID = auth.NewID("key_")
	// Every record issued today has kind "org" (the spec's only value);
	// Owner and the credential kind say whose it is.
	k.Kind = "org"
	k.Name = name
	k.Prefix = display
	k.CreatedBy = p.Actor()
	k.Source = source
	k.Created = now
	k.OrgID = p.OrgID
	k.Hash = hash
	return token, k
}

// ValidateName checks a key name: 1-100 characters, no control characters.
func ValidateName(name string) error {
	if name == "" {
		return domain.Invalid("name", "name is required")
	}
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > 100 {
		return domain.Invalid("name", "name must be at most 100 characters of UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return domain.Invalid("name", "name must not contain control characters")
		}
	}
	return nil
}

// List returns the key records the caller may see: all of the organization's
// for an admin, a member's own CLI tokens otherwise.
func (s *Service) List(ctx context.Context, p domain.Principal) ([]domain.APIKey, error) {
	all, err := s.store.ListKeys(ctx, p.OrgID)
	if err != nil {
		return nil, err
	}
	out := make([]domain.APIKey, 0, len(all))
	for _, k := range all {
		if k.Credential == domain.CredentialNode && !p.IsAdmin() {
			continue
		}
		if p.IsAdmin() || (p.UserID != "" && k.UserID == p.UserID) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Revoke sets revoked on a key. Admins revoke any key of their organization;
// a member only their own CLI tokens. Revoking twice is harmless. A node
// credential's open connections are closed once it is revoked (also when it
// already was, so revoking again retries what failed).
func (s *Service) Revoke(ctx context.Context, p domain.Principal, id string) (domain.APIKey, error) {
	k, err := s.store.GetKey(ctx, p.OrgID, id)
	if err != nil {
		return domain.APIKey{}, err
	}
	if !p.IsAdmin() && (p.UserID == "" || k.UserID != p.UserID) {
		return domain.APIKey{}, domain.Errorf(domain.CodeForbidden, "you can revoke only your own CLI tokens")
	}
	k, err = s.store.RevokeKey(ctx, k, s.clock.Now())
	if err != nil {
		return domain.APIKey{}, err
	}
	if s.closer != nil && k.Credential == domain.CredentialNode {
		if err := s.closer.CloseConnections(ctx, k); err != nil {
			return domain.APIKey{}, err
		}
	}
	return k, nil
}
