package identity_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/identity"
)

// issuerStack serves the issuer's documents over HTTP at its own URL, with
// keys from src (nil: the local keys, kept in the table).
type issuerStack struct {
	url    string
	issuer *identity.Issuer
	svc    *identity.Service
	local  *identity.Local
	clock  *clock.Fake
}

func newIssuerStack(t *testing.T, src identity.KeySource) *issuerStack {
	t.Helper()
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	s := &issuerStack{url: srv.URL}
	apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		s.clock = e.Clock
		if src == nil {
			s.local = identity.NewLocal(e.Store, e.Clock)
			src = s.local
		}
		s.issuer = identity.NewIssuer(srv.URL, src, e.Clock)
		s.svc = identity.NewService(s.issuer, nil, nil)
		h = httpapi.New(httpapi.Config{Logger: e.Log, Auth: apitest.NewAuth(e)}, identity.Routes(s.svc))
		return nil
	})
	return s
}

// verifier is go-oidc's, from the stack's own discovery document, for aud,
// at the stack's (fake) time.
func (s *issuerStack) verifier(t *testing.T, aud string) *oidc.IDTokenVerifier {
	t.Helper()
	p, err := oidc.NewProvider(context.Background(), s.url)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	return p.Verifier(&oidc.Config{ClientID: aud, Now: s.clock.Now, SupportedSigningAlgs: []string{"ES256"}})
}

func leased(now time.Time) domain.Environment {
	return domain.Environment{
		OrgID: "acme", ID: "env_0123456789abcdef", Template: "ci", Project: "payments", Pool: "local",
		Labels: map[string]string{"team": "pay"}, CreatedBy: "bob", Created: now, State: domain.StateReady,
		Identity: &domain.TemplateIdentity{Audiences: []string{"sts.amazonaws.com", "//iam.googleapis.com/projects/1/x"}, Lifetime: domain.Duration(30 * time.Minute)},
	}
}

// Tokens verify with go-oidc against the discovery document: every claim
// as documented; an expired one, one for another audience and one signed
// by a key retired past the longest lifetime are refused.
func TestTokensVerifyWithGoOIDC(t *testing.T) {
	s := newIssuerStack(t, nil)
	ctx := context.Background()
	e := leased(s.clock.Now())
	out, err := s.svc.Tokens(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tokens) != 2 {
		t.Fatalf("%d tokens, want one per audience", len(out.Tokens))
	}
	if want := s.clock.Now().Add(24 * time.Minute); !out.Refresh.Equal(want) {
		t.Errorf("refresh at %s, want %s (80%% of 30m)", out.Refresh, want)
	}
	for _, tok := range out.Tokens {
		if want := "/run/envlease/identity/" + domain.AudienceFolder(tok.Audience) + "/token"; tok.Path != want {
			t.Errorf("path %s, want %s", tok.Path, want)
		}
		idt, err := s.verifier(t, tok.Audience).Verify(ctx, tok.Token)
		if err != nil {
			t.Fatalf("verify %s: %v", tok.Audience, err)
		}
		var c identity.Claims
		if err := idt.Claims(&c); err != nil {
			t.Fatal(err)
		}
		now := s.clock.Now().Unix()
		if c.Issuer != s.url || c.Subject != "org:acme:template:ci:project:payments" || c.Audience != tok.Audience ||
			c.IssuedAt.Time().Unix() != now || c.NotBefore.Time().Unix() != now || c.Expiry.Time().Unix() != now+1800 ||
			!strings.HasPrefix(c.ID, "jti_") || c.Org != "acme" || c.Template != "ci" || c.Project != "payments" ||
			!reflect.DeepEqual(c.Labels, map[string]string{"team": "pay"}) || c.Environment != e.ID || c.Pool != "local" ||
			c.LeasedBy != "bob" || c.LeasedByKind != "user" {
			t.Errorf("claims %+v", c)
		}
		if !tok.Expires.Equal(c.Expiry.Time()) {
			t.Errorf("expires %s, claims say %s", tok.Expires, c.Expiry.Time())
		}
	}
	aws := out.Tokens[0].Token

	// Another audience: refused.
	if _, err := s.verifier(t, "vault").Verify(ctx, aws); err == nil {
		t.Error("a token for sts.amazonaws.com verified for audience vault")
	}
	// Expired: refused.
	s.clock.Advance(31 * time.Minute)
	if _, err := s.verifier(t, "sts.amazonaws.com").Verify(ctx, aws); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired token: %v, want refused as expired", err)
	}

	// Rotation: the next key is published before it signs, a retired one
	// stays published (its tokens verify until they expire), then leaves.
	s.clock.Set(apitest.Start)
	before, err := s.issuer.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Keys) != 2 {
		t.Fatalf("JWKS has %d keys, want the current and the next", len(before.Keys))
	}
	if err := s.local.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := s.issuer.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := s.svc.Tokens(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	published := func(set []jose.JSONWebKey, kid string) bool {
		for _, k := range set {
			if k.KeyID == kid {
				return true
			}
		}
		return false
	}
	if signedBy(t, fresh.Tokens[0].Token) != before.Keys[1].KeyID {
		t.Error("after rotation the token is not signed by the key published as next")
	}
	if len(after.Keys) != 3 || !published(after.Keys, signedBy(t, aws)) {
		t.Errorf("after rotation the JWKS has %d keys (want current, next and the retired one)", len(after.Keys))
	}
	if _, err := s.verifier(t, "sts.amazonaws.com").Verify(ctx, aws); err != nil {
		t.Errorf("a token of the retired key, still live: %v", err)
	}
	// Past the longest lifetime the retired key leaves the JWKS: a token it
	// signed (whatever its claims say) is refused.
	s.clock.Advance(domain.MaxIdentityLifetime)
	if err := s.local.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	late, err := s.issuer.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if published(late.Keys, before.Keys[0].KeyID) {
		t.Fatalf("the first key is still published %s after it retired", domain.MaxIdentityLifetime)
	}
	// Even a verifier that skips the expiry (so only the key can refuse it).
	p, err := oidc.NewProvider(ctx, s.url)
	if err != nil {
		t.Fatal(err)
	}
	stale := p.Verifier(&oidc.Config{ClientID: "sts.amazonaws.com", SkipExpiryCheck: true})
	if _, err := stale.Verify(ctx, aws); err == nil {
		t.Error("a token signed by a key retired past the longest lifetime verified")
	}
}
