// Package federation exchanges CI identity tokens for short-lived scoped
// envlease tokens: an organization registers the OIDC issuers it trusts,
// with claim conditions, and a job's identity token from one of them,
// verified against the issuer's published keys, buys a token (docs/ci.md).
// Signatures and claims are checked by go-oidc and go-jose, never here.
package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"

	"github.com/envlease/envlease/shared/clock"
)

// Algorithms an identity token may be signed with; "none" and the HMAC
// family (a shared secret is no proof from a public issuer) never are.
var algorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

func algorithmNames() []string {
	out := make([]string, len(algorithms))
	for i, a := range algorithms {
		out[i] = string(a)
	}
	return out
}

// Cache lifetimes: discovery documents and key sets are kept this long; a
// token signed by a key id the cached set lacks refetches the set (an
// issuer rotating its keys), at most once per refetchInterval per issuer.
const (
	discoveryTTL     = time.Hour
	keysTTL          = time.Hour
	refetchInterval  = 10 * time.Second
	maxDocumentBytes = 1 << 20
)

// Reasons an identity token is refused. Each is said to the caller as it
// is: none names a condition's expected value.
var (
	errMalformed    = errors.New("the identity token is not a signed JWT")
	errAlgorithm    = errors.New("the identity token's signing algorithm is not accepted")
	errUnknownKey   = errors.New("the identity token is signed with a key the issuer does not publish")
	errBadSignature = errors.New("the identity token's signature does not verify")
	errExpired      = errors.New("the identity token has expired")
	errNotYetValid  = errors.New("the identity token is not valid yet")
	errIssuer       = errors.New("the identity token's issuer is not trusted by this organization")
	errAudience     = errors.New("the identity token's audience is not accepted")
)

// errFetch is an issuer whose discovery document or keys could not be had.
type errFetch struct{ err error }

func (e errFetch) Error() string { return "the issuer's keys could not be fetched: " + e.err.Error() }

// Verifiers verifies identity tokens of any issuer, keeping each issuer's
// discovery document and keys for the next exchange (a warm function
// serves many).
type Verifiers struct {
	client *http.Client
	clock  clock.Clock

	mu    sync.Mutex
	byURL map[string]*issuerEntry
}

type issuerEntry struct {
	discovered time.Time
	verifier   *oidc.IDTokenVerifier
	keys       *keySet
}

// NewVerifiers returns verifiers that fetch through client (the guarded
// client that refuses non-public addresses, unless a local stack allows
// loopback).
func NewVerifiers(client *http.Client, clk clock.Clock) *Verifiers {
	// go-oidc reads a discovery document whole: every answer an issuer
	// gives is cut at maxDocumentBytes, so none can fill the function's
	// memory.
	c := *client
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = boundedTransport{rt}
	return &Verifiers{client: &c, clock: clk, byURL: map[string]*issuerEntry{}}
}

// boundedTransport fails the read of an answer longer than
// maxDocumentBytes.
type boundedTransport struct{ rt http.RoundTripper }

func (b boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.rt.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	resp.Body = &boundedBody{rc: resp.Body, left: maxDocumentBytes}
	return resp, nil
}

var errTooLarge = fmt.Errorf("the issuer's answer is over %d bytes", maxDocumentBytes)

type boundedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errTooLarge
	}
	// Read one byte past the bound, to tell a document of exactly the
	// bound from a longer one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// Verify checks raw's signature against issuerURL's published keys and its
// issuer, expiry and not-before; audience and conditions are the caller's.
func (v *Verifiers) Verify(ctx context.Context, issuerURL, raw string) (*oidc.IDToken, error) {
	e, err := v.entry(ctx, issuerURL)
	if err != nil {
		return nil, err
	}
	n := &note{}
	tok, err := e.verifier.Verify(context.WithValue(ctx, noteKey{}, n), raw)
	if err == nil {
		return tok, nil
	}
	var expired *oidc.TokenExpiredError
	switch {
	case n.err != nil:
		return nil, n.err
	case errors.As(err, &expired):
		return nil, errExpired
	case strings.Contains(err.Error(), "nbf"):
		return nil, errNotYetValid
	case strings.Contains(err.Error(), "issued by a different provider"):
		return nil, errIssuer
	case strings.Contains(err.Error(), "malformed jwt"):
		return nil, errAlgorithm
	}
	return nil, fmt.Errorf("%w (%v)", errMalformed, err)
}

// entry returns issuerURL's verifier, discovering it when it is not cached
// or its discovery is older than discoveryTTL.
func (v *Verifiers) entry(ctx context.Context, issuerURL string) (*issuerEntry, error) {
	now := v.clock.Now()
	v.mu.Lock()
	e := v.byURL[issuerURL]
	v.mu.Unlock()
	if e != nil && now.Sub(e.discovered) < discoveryTTL {
		return e, nil
	}
	fctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, v.client), 10*time.Second)
	defer cancel()
	// NewProvider refuses a discovery document whose issuer is not
	// issuerURL, so a document cannot speak for another issuer.
	p, err := oidc.NewProvider(fctx, issuerURL)
	if err != nil {
		return nil, errFetch{err}
	}
	var doc struct {
		JWKS string `json:"jwks_uri"`
	}
	if err := p.Claims(&doc); err != nil || doc.JWKS == "" {
		return nil, errFetch{errors.New("the discovery document has no jwks_uri")}
	}
	ks := &keySet{url: doc.JWKS, client: v.client, clock: v.clock}
	if e != nil && e.keys.url == doc.JWKS {
		ks = e.keys // keep the keys already fetched
	}
	e = &issuerEntry{discovered: now, keys: ks, verifier: oidc.NewVerifier(issuerURL, ks, &oidc.Config{
		// Audiences are checked against each registration by the caller.
		SkipClientIDCheck:    true,
		SupportedSigningAlgs: algorithmNames(),
		Now:                  v.clock.Now,
	})}
	v.mu.Lock()
	v.byURL[issuerURL] = e
	v.mu.Unlock()
	return e, nil
}

// note carries why the key set refused a signature out of go-oidc, which
// wraps the error as text.
type note struct{ err error }

type noteKey struct{}

// keySet is an issuer's published keys (its JWKS), cached, refetched when
// old or when a token names a key id it lacks (rotation). It finds the key;
// go-jose checks the signature.
type keySet struct {
	url    string
	client *http.Client
	clock  clock.Clock

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time
}

// VerifySignature implements oidc.KeySet.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	n, _ := ctx.Value(noteKey{}).(*note)
	fail := func(err error) ([]byte, error) {
		if n != nil {
			n.err = err
		}
		return nil, err
	}
	jws, err := jose.ParseSigned(raw, algorithms)
	if err != nil || len(jws.Signatures) != 1 {
		return fail(errAlgorithm)
	}
	kid := jws.Signatures[0].Header.KeyID
	keys, err := k.find(ctx, kid)
	if err != nil {
		return fail(err)
	}
	if len(keys) == 0 {
		return fail(errUnknownKey)
	}
	for _, key := range keys {
		if payload, err := jws.Verify(&key); err == nil {
			return payload, nil
		}
	}
	return fail(errBadSignature)
}

// find returns the keys a token with kid may be signed with (every key
// when the token names none), refetching the set when kid is unknown.
func (k *keySet) find(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock.Now()
	match := func() []jose.JSONWebKey {
		var out []jose.JSONWebKey
		for _, key := range k.keys {
			if kid == "" || key.KeyID == kid {
				out = append(out, key)
			}
		}
		return out
	}
	stale := k.fetched.IsZero() || now.Sub(k.fetched) >= keysTTL
	found := match()
	if len(found) > 0 && !stale {
		return found, nil
	}
	if !stale && now.Sub(k.fetched) < refetchInterval {
		return nil, nil
	}
	keys, err := k.fetch(ctx)
	if err != nil && len(found) > 0 {
		return found, nil // an issuer down for a moment: its known keys still stand
	}
	if err != nil {
		return nil, errFetch{err}
	}
	k.keys, k.fetched = keys, now
	return match(), nil
}

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("keys answered %s", resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("keys are not a JWK set: %w", err)
	}
	// Only public signing keys count; a set that carries a private or
	// symmetric key is a misconfigured issuer, whose tokens are refused.
	out := set.Keys[:0]
	for _, key := range set.Keys {
		if key.IsPublic() && key.Valid() && (key.Use == "" || key.Use == "sig") {
			out = append(out, key)
		}
	}
	return out, nil
}
