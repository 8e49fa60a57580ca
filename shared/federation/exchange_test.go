package federation_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/federation"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
)

// issuer is a local OIDC issuer: its discovery document and key set are
// served by the test, and it signs identity tokens with its current key.
type issuer struct {
	srv *httptest.Server

	mu         sync.Mutex
	published  []jose.JSONWebKey
	keyFetches int
}

func newIssuer(t *testing.T) *issuer {
	is := &issuer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		is.mu.Lock()
		defer is.mu.Unlock()
		is.keyFetches++
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: is.published})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

// signer is a private key with the key id tokens name.
type signer struct {
	kid string
	key any
	alg jose.SignatureAlgorithm
}

func newRSA(t *testing.T, kid string) signer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, key: k, alg: jose.RS256}
}

func newEC(t *testing.T, kid string) signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, key: k, alg: jose.ES256}
}

func (s signer) public() jose.JSONWebKey {
	var pub any
	switch k := s.key.(type) {
	case *rsa.PrivateKey:
		pub = &k.PublicKey
	case *ecdsa.PrivateKey:
		pub = &k.PublicKey
	}
	return jose.JSONWebKey{Key: pub, KeyID: s.kid, Algorithm: string(s.alg), Use: "sig"}
}

func (is *issuer) publish(keys ...signer) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.published = nil
	for _, k := range keys {
		is.published = append(is.published, k.public())
	}
}

func sign(t *testing.T, s signer, claims map[string]any) string {
	t.Helper()
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: jose.JSONWebKey{Key: s.key, KeyID: s.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	obj, err := sg.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unsigned is a token with alg "none".
func unsigned(claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "none", "typ": "JWT", "kid": "k1"}) + "." + enc(claims) + "."
}

type fedEnv struct {
	*apitest.Env
	is   *issuer
	k1   signer
	addr int
}

func newFedEnv(t *testing.T) *fedEnv {
	is := newIssuer(t)
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		ks := keys.NewService(e.Store, e.Clock)
		return [][]httpapi.Route{
			federation.Routes(apitest.NewFederation(e)),
			keys.TokenRoutes(ks), keys.KeyRoutes(ks),
			environments.Routes(environments.NewService(e.Store, e.Clock)),
			events.Routes(events.NewService(e.Store, e.Clock)),
		}
	})
	f := &fedEnv{Env: e, is: is, k1: newRSA(t, "k1")}
	is.publish(f.k1)
	r := e.Do(http.MethodPost, "/v1/issuers", apitest.AliceToken, map[string]any{
		"name": "ci", "url": is.srv.URL, "audience": "envlease",
		"conditions":   map[string]string{"repository": "acme/app", "ref": "refs/heads/*"},
		"scopes":       []string{"environments:read", "environments:lease"},
		"restrictions": map[string]any{"templates": []string{"sleeper"}},
	})
	if r.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	return f
}

// claims are a good token's claims at the fake clock's now.
func (f *fedEnv) claims() map[string]any {
	now := f.Clock.Now()
	return map[string]any{
		"iss": f.is.srv.URL, "aud": "envlease", "sub": "repo:acme/app:ref:refs/heads/main",
		"repository": "acme/app", "ref": "refs/heads/main",
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}
}

// exchange posts token from a fresh address (refusals count towards an
// address's block; each case gets its own).
func (f *fedEnv) exchange(token string) *apitest.Response {
	f.addr++
	f.RemoteAddr = fmt.Sprintf("192.0.2.%d:1000", 10+f.addr)
	return f.Do(http.MethodPost, "/v1/tokens/exchange", "", map[string]any{"organization": "acme", "token": token})
}

func with(c map[string]any, k string, v any) map[string]any {
	c[k] = v
	return c
}

func TestExchangeGoodToken(t *testing.T) {
	f := newFedEnv(t)
	r := f.exchange(sign(t, f.k1, f.claims()))
	if r.Status != http.StatusCreated {
		t.Fatalf("exchange: %d %s", r.Status, r.Body)
	}
	var out keys.Issued
	r.JSON(t, &out)
	k := out.APIKey
	if !strings.HasPrefix(out.Token, "els_org_") || k.Source != "oidc" || k.Expires == nil ||
		!k.Expires.Equal(apitest.Start.Add(15*time.Minute)) || len(k.Scopes) != 2 || k.Exchange == nil ||
		k.Exchange.Subject != "repo:acme/app:ref:refs/heads/main" || k.Exchange.Claims["repository"] != "acme/app" {
		t.Fatalf("issued %+v", k)
	}
	if r := f.Do(http.MethodGet, "/v1/environments", out.Token, nil); r.Status != http.StatusOK {
		t.Fatalf("inside its scopes: %d %s", r.Status, r.Body)
	}
	if r := f.Do(http.MethodGet, "/v1/events", out.Token, nil); r.Status != http.StatusForbidden || r.Code() != "insufficient_scope" {
		t.Fatalf("outside its scopes: %d %s", r.Status, r.Body)
	}
	if r := f.Do(http.MethodPost, "/v1/environments", out.Token, map[string]any{"template": "shell"}); r.Status != http.StatusForbidden || r.Code() != "restricted" {
		t.Fatalf("outside its restrictions: %d %s", r.Status, r.Body)
	}
	// The exchange is an event, with the identity it came from.
	var evs struct {
		Events []domain.Event `json:"events"`
	}
	f.Do(http.MethodGet, "/v1/events?type=key.created", apitest.AliceToken, nil).JSON(t, &evs)
	found := false
	for _, ev := range evs.Events {
		if ev.Subject.ID == k.ID && ev.Data["exchange"] != nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("no key.created event with the exchange: %+v", evs.Events)
	}
	// After its lifetime the token is expired.
	f.Clock.Advance(15 * time.Minute)
	if r := f.Do(http.MethodGet, "/v1/environments", out.Token, nil); r.Status != http.StatusUnauthorized || !strings.Contains(r.Header.Get("WWW-Authenticate"), "expired") {
		t.Fatalf("after its lifetime: %d %s", r.Status, r.Body)
	}
}

func TestExchangeRefusals(t *testing.T) {
	f := newFedEnv(t)
	other := newRSA(t, "k1") // same key id, another key
	unknown := newRSA(t, "k9")
	now := f.Clock.Now()
	cases := []struct {
		name  string
		token func() string
		want  string
	}{
		{"wrong audience", func() string { return sign(t, f.k1, with(f.claims(), "aud", "someone-else")) }, "audience is not accepted"},
		{"expired", func() string { return sign(t, f.k1, with(f.claims(), "exp", now.Add(-time.Minute).Unix())) }, "has expired"},
		{"not yet valid", func() string { return sign(t, f.k1, with(f.claims(), "nbf", now.Add(time.Hour).Unix())) }, "not valid yet"},
		{"wrong issuer", func() string { return sign(t, f.k1, with(f.claims(), "iss", "https://issuer.example.com")) }, "issuer is not trusted"},
		{"unknown key id", func() string { return sign(t, unknown, f.claims()) }, "key the issuer does not publish"},
		{"signed by another key", func() string { return sign(t, other, f.claims()) }, "signature does not verify"},
		{"alg none", func() string { return unsigned(f.claims()) }, "algorithm is not accepted"},
		{"claim mismatch", func() string { return sign(t, f.k1, with(f.claims(), "repository", "evil/app")) }, `claim "repository" does not meet`},
		{"pattern mismatch", func() string { return sign(t, f.k1, with(f.claims(), "ref", "refs/tags/v1")) }, `claim "ref" does not meet`},
		{"claim missing", func() string { c := f.claims(); delete(c, "ref"); return sign(t, f.k1, c) }, `claim "ref" does not meet`},
		{"not a JWT", func() string { return "not-a-token" }, "not a signed JWT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.exchange(c.token())
			if r.Status != http.StatusUnauthorized || r.Code() != "unauthorized" || !strings.Contains(r.Map(t)["error"].(string), c.want) {
				t.Fatalf("%d %s, want 401 saying %q", r.Status, r.Body, c.want)
			}
			// The refusal names why, never what was expected.
			for _, secret := range []string{"acme/app", "refs/heads", "envlease"} {
				if strings.Contains(string(r.Body), secret) {
					t.Fatalf("refusal leaks %q: %s", secret, r.Body)
				}
			}
		})
	}
	// Refusals of the trusted issuer's genuine tokens (signature verified:
	// audience, conditions) are its organization's events; anything that may
	// be forged (a bad signature, or expiry, judged before the signature) is
	// not, so no one without a token writes into the organization's events.
	var evs struct {
		Events []domain.Event `json:"events"`
	}
	f.Do(http.MethodGet, "/v1/events?type=issuer.refused&limit=100", apitest.AliceToken, nil).JSON(t, &evs)
	reasons := map[string]bool{}
	for _, ev := range evs.Events {
		reasons[ev.Data["reason"].(string)] = true
	}
	if len(evs.Events) != 4 || !reasons["the identity token's audience is not accepted"] {
		t.Fatalf("%d issuer.refused events, want 4 (audience and the three conditions): %v", len(evs.Events), reasons)
	}
	// An unknown organization is refused as an untrusted issuer.
	f.RemoteAddr = "192.0.2.200:1"
	r := f.Do(http.MethodPost, "/v1/tokens/exchange", "", map[string]any{"organization": "nobody", "token": sign(t, f.k1, f.claims())})
	if r.Status != http.StatusUnauthorized || !strings.Contains(string(r.Body), "issuer is not trusted") {
		t.Fatalf("unknown organization: %d %s", r.Status, r.Body)
	}
	f.RemoteAddr = "192.0.2.201:1"
	r = f.Do(http.MethodPost, "/v1/tokens/exchange", "", map[string]any{"organization": "acme#KEYS", "token": sign(t, f.k1, f.claims())})
	if r.Status != http.StatusUnauthorized || !strings.Contains(string(r.Body), "issuer is not trusted") {
		t.Fatalf("not an organization id: %d %s", r.Status, r.Body)
	}
}

// Refused exchanges count towards the address's block like bad tokens.
func TestExchangeRefusalsBlockTheAddress(t *testing.T) {
	f := newFedEnv(t)
	bad := sign(t, f.k1, with(f.claims(), "aud", "other"))
	f.RemoteAddr = "192.0.2.99:1"
	for i := 0; i < 10; i++ {
		if r := f.Do(http.MethodPost, "/v1/tokens/exchange", "", map[string]any{"organization": "acme", "token": bad}); r.Status != http.StatusUnauthorized {
			t.Fatalf("refusal %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := f.Do(http.MethodPost, "/v1/tokens/exchange", "", map[string]any{"organization": "acme", "token": sign(t, f.k1, f.claims())})
	if r.Status != http.StatusTooManyRequests || r.Code() != "locked" {
		t.Fatalf("blocked: %d %s", r.Status, r.Body)
	}
}

// The issuer rotates its key: a token signed by the new key (unknown to
// the cached set) refetches the keys and passes; the retired key's tokens
// are then refused; refetches are bounded.
func TestExchangeKeyRotation(t *testing.T) {
	f := newFedEnv(t)
	if r := f.exchange(sign(t, f.k1, f.claims())); r.Status != http.StatusCreated {
		t.Fatalf("before rotation: %d %s", r.Status, r.Body)
	}
	k2 := newEC(t, "k2")
	f.is.publish(k2)
	f.Clock.Advance(11 * time.Second)
	if r := f.exchange(sign(t, k2, f.claims())); r.Status != http.StatusCreated {
		t.Fatalf("new key: %d %s", r.Status, r.Body)
	}
	f.Clock.Advance(11 * time.Second)
	if r := f.exchange(sign(t, f.k1, f.claims())); r.Status != http.StatusUnauthorized || !strings.Contains(string(r.Body), "does not publish") {
		t.Fatalf("retired key: %d %s", r.Status, r.Body)
	}
	// Within the refetch interval, unknown key ids cost no fetch.
	f.is.mu.Lock()
	before := f.is.keyFetches
	f.is.mu.Unlock()
	for i := 0; i < 3; i++ {
		f.exchange(sign(t, newRSA(t, fmt.Sprintf("x%d", i)), f.claims()))
	}
	f.is.mu.Lock()
	after := f.is.keyFetches
	f.is.mu.Unlock()
	if after != before {
		t.Fatalf("%d key fetches for unknown key ids within the refetch interval", after-before)
	}
}

func TestRegisterIssuer(t *testing.T) {
	f := newFedEnv(t)
	base := func() map[string]any {
		return map[string]any{"name": "gh", "url": f.is.srv.URL, "audience": "envlease",
			"conditions": map[string]string{"repository": "acme/app"}, "scopes": []string{"environments:lease"}}
	}
	cases := []struct {
		name   string
		token  string
		body   map[string]any
		status int
		field  string
	}{
		{"member", apitest.BobToken, base(), 403, ""},
		{"no conditions", apitest.AliceToken, with(base(), "conditions", map[string]string{}), 422, "conditions"},
		{"condition on aud", apitest.AliceToken, with(base(), "conditions", map[string]string{"aud": "x"}), 422, "conditions"},
		{"admin scope", apitest.AliceToken, with(base(), "scopes", []string{"admin"}), 403, ""},
		{"no scopes", apitest.AliceToken, with(base(), "scopes", nil), 422, "scopes"},
		{"no audience", apitest.AliceToken, with(base(), "audience", ""), 422, "audience"},
		{"long lifetime", apitest.AliceToken, with(base(), "tokenLifetime", "2h"), 422, "tokenLifetime"},
		{"not a URL", apitest.AliceToken, with(base(), "url", "issuer"), 422, "url"},
		{"good", apitest.AliceToken, base(), 201, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.Do(http.MethodPost, "/v1/issuers", c.token, c.body)
			if r.Status != c.status || (c.field != "" && r.Map(t)["field"] != c.field) {
				t.Fatalf("%d %s, want %d %s", r.Status, r.Body, c.status, c.field)
			}
		})
	}
	var listed struct {
		Issuers []domain.TrustedIssuer `json:"issuers"`
	}
	f.Do(http.MethodGet, "/v1/issuers", apitest.AliceToken, nil).JSON(t, &listed)
	if len(listed.Issuers) != 2 || listed.Issuers[0].TokenLifetime != domain.Duration(15*time.Minute) {
		t.Fatalf("listed %+v", listed.Issuers)
	}
	for _, is := range listed.Issuers {
		if r := f.Do(http.MethodDelete, "/v1/issuers/"+is.ID, apitest.AliceToken, nil); r.Status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
	}
	if r := f.Do(http.MethodDelete, "/v1/issuers/"+listed.Issuers[0].ID, apitest.AliceToken, nil); r.Status != http.StatusNotFound {
		t.Fatalf("delete again: %d %s", r.Status, r.Body)
	}
	var evs struct {
		Events []domain.Event `json:"events"`
	}
	f.Do(http.MethodGet, "/v1/events?type=issuer.", apitest.AliceToken, nil).JSON(t, &evs)
	kinds := map[string]int{}
	for _, ev := range evs.Events {
		kinds[ev.Type]++
	}
	if kinds["issuer.trusted"] != 2 || kinds["issuer.removed"] != 2 {
		t.Fatalf("issuer events %v", kinds)
	}
	// Without a trusted issuer, its tokens buy nothing.
	if r := f.exchange(sign(t, f.k1, f.claims())); r.Status != http.StatusUnauthorized {
		t.Fatalf("after delete: %d %s", r.Status, r.Body)
	}
}

// An issuer registered by a scoped token that expires grants no scope or
// restriction beyond that token's, mints no token that outlives it, and
// trusts no one once it has expired.
func TestIssuerOfAnExpiringTokenEndsWithIt(t *testing.T) {
	f := newFedEnv(t)
	// Only the new registration: the fixture's one trusts the same URL.
	var listed struct {
		Issuers []domain.TrustedIssuer `json:"issuers"`
	}
	f.Do(http.MethodGet, "/v1/issuers", apitest.AliceToken, nil).JSON(t, &listed)
	for _, is := range listed.Issuers {
		f.Do(http.MethodDelete, "/v1/issuers/"+is.ID, apitest.AliceToken, nil)
	}
	r := f.Do(http.MethodPost, "/v1/tokens", apitest.AliceToken, map[string]any{
		"name": "short", "scopes": []string{"admin", "environments:read"}, "expiresIn": "10m",
		"restrictions": map[string]any{"templates": []string{"sleeper"}}})
	short, _ := r.Map(t)["token"].(string)
	body := map[string]any{"name": "gh", "url": f.is.srv.URL, "audience": "envlease",
		"conditions": map[string]string{"repository": "acme/app"}, "scopes": []string{"environments:lease"}}
	if r := f.Do(http.MethodPost, "/v1/issuers", short, body); r.Status != http.StatusForbidden || r.Code() != "insufficient_scope" {
		t.Fatalf("a scope the registrant lacks: %d %s", r.Status, r.Body)
	}
	body["scopes"] = []string{"environments:read"}
	r = f.Do(http.MethodPost, "/v1/issuers", short, body)
	var made struct {
		Issuer domain.TrustedIssuer `json:"issuer"`
	}
	r.JSON(t, &made)
	end := apitest.Start.Add(10 * time.Minute)
	if r.Status != http.StatusCreated || made.Issuer.Expires == nil || !made.Issuer.Expires.Equal(end) ||
		made.Issuer.Restrictions == nil || len(made.Issuer.Restrictions.Templates) != 1 {
		t.Fatalf("registered by a limited token: %d %s", r.Status, r.Body)
	}
	// Its exchanges end with it (15 minutes would be the issuer's lifetime).
	r = f.exchange(sign(t, f.k1, f.claims()))
	var out keys.Issued
	r.JSON(t, &out)
	if r.Status != http.StatusCreated || out.APIKey.Expires == nil || !out.APIKey.Expires.Equal(end) {
		t.Fatalf("exchange: %d %s", r.Status, r.Body)
	}
	f.Clock.Advance(10 * time.Minute)
	if r := f.exchange(sign(t, f.k1, f.claims())); r.Status != http.StatusUnauthorized {
		t.Fatalf("exchange after the issuer expired: %d %s", r.Status, r.Body)
	}
}
