package identity

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// KeySource gives the issuer's keys: fixed (Static), kept in the table
// (Local), or KMS keys named by configuration (KMSKeys).
type KeySource interface {
	Keyring(ctx context.Context) (Keyring, error)
}

// Static is a keyring that never changes.
type Static Keyring

// Keyring answers r.
func (r Static) Keyring(context.Context) (Keyring, error) { return Keyring(r), nil }

// Issuer signs environments' tokens and publishes its keys.
type Issuer struct {
	url   string
	keys  KeySource
	clock clock.Clock
}

// NewIssuer is the issuer at url: the API's public base URL, with no
// trailing slash (the iss of every token, and where
// /.well-known/openid-configuration is served).
func NewIssuer(url string, keys KeySource, clk clock.Clock) *Issuer {
	return &Issuer{url: strings.TrimRight(url, "/"), keys: keys, clock: clk}
}

// URL is the issuer's identifier.
func (is *Issuer) URL() string { return is.url }

// JWKSPath is where the key set is served.
const JWKSPath = "/.well-known/jwks.json"

// DiscoveryPath is where the discovery document is served.
const DiscoveryPath = "/.well-known/openid-configuration"

// Discovery is the OpenID Provider metadata a verifier reads
// (OpenID Connect Discovery 1.0, section 3): what AWS IAM's OIDC provider,
// GCP's workload identity pools and go-oidc fetch.
type Discovery struct {
	Issuer          string   `json:"issuer"`
	JWKSURI         string   `json:"jwks_uri"`
	ResponseTypes   []string `json:"response_types_supported"`
	SubjectTypes    []string `json:"subject_types_supported"`
	SigningAlgs     []string `json:"id_token_signing_alg_values_supported"`
	ClaimsSupported []string `json:"claims_supported"`
	ScopesSupported []string `json:"scopes_supported"`
	AuthEndpoint    string   `json:"authorization_endpoint,omitempty"`
}

// Discovery is the issuer's discovery document.
func (is *Issuer) Discovery() Discovery {
	return Discovery{
		Issuer: is.url, JWKSURI: is.url + JWKSPath,
		ResponseTypes: []string{"id_token"}, SubjectTypes: []string{"public"}, SigningAlgs: []string{string(Algorithm)},
		ClaimsSupported: []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "org", "template", "project", "labels",
			"environment", "pool", "leasedBy", "leasedByKind"},
		ScopesSupported: []string{"openid"},
	}
}

// JWKS is the key set published now.
func (is *Issuer) JWKS(ctx context.Context) (jose.JSONWebKeySet, error) {
	r, err := is.keys.Keyring(ctx)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	return r.JWKS(is.clock.Now()), nil
}

// Sign signs c with the current key.
func (is *Issuer) Sign(ctx context.Context, c Claims) (string, error) {
	r, err := is.keys.Keyring(ctx)
	if err != nil {
		return "", err
	}
	if r.Current.Signer == nil {
		return "", domain.Internal(fmt.Errorf("identity: the current key has no signer"))
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: Algorithm, Key: opaque{ctx: ctx, key: r.Current}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", domain.Internal(fmt.Errorf("identity: signer: %w", err))
	}
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		return "", domain.Unavailable("the identity signing key", err)
	}
	return tok, nil
}

// Token is one audience's token of an environment.
type Token struct {
	Audience string    `json:"audience"`
	Token    string    `json:"token"`
	Expires  time.Time `json:"expires"`
	// Path is where the environment finds it (TokenPath).
	Path string `json:"path"`
	// ID is its jti, for the issuer's log.
	ID string `json:"-"`
}

// TokenPath is the file inside an environment that holds its token for aud.
func TokenPath(aud string) string {
	return path.Join(domain.IdentityPath, domain.AudienceFolder(aud), "token")
}

// Tokens signs a token of e for each audience of its identity.
func (is *Issuer) Tokens(ctx context.Context, e domain.Environment) ([]Token, error) {
	if e.Identity == nil {
		return nil, domain.Errorf(domain.CodeConflict, "environment %s has no identity: its template asks for none", e.ID)
	}
	now := is.clock.Now()
	out := make([]Token, 0, len(e.Identity.Audiences))
	for _, aud := range e.Identity.Audiences {
		c := ClaimsFor(is.url, e, aud, now, domain.SortableID("jti_", now))
		tok, err := is.Sign(ctx, c)
		if err != nil {
			return nil, err
		}
		out = append(out, Token{Audience: aud, Token: tok, Expires: c.Expiry.Time().UTC(), Path: TokenPath(aud), ID: c.ID})
	}
	return out, nil
}
