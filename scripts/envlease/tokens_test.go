package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// envlease tokens create --scope --expires makes a token that can do only
// that, and says so when asked for more.
func TestScopedTokenFromTheCLI(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	var issued client.IssuedKey
	u.json(&issued, "tokens", "create", "ci", "--scope", "environments:read", "--scope", "environments:lease",
		"--expires", "1h", "--template", "sleeper")
	k := issued.APIKey
	if len(k.Scopes) != 2 || k.Expires == nil || time.Until(*k.Expires) > time.Hour || k.Restrictions == nil || k.Restrictions.Templates[0] != "sleeper" {
		t.Fatalf("issued %+v", k)
	}
	contains(t, "keys ls", u.ok("keys", "ls"), "SCOPES", "environments:lease,environments:read (restricted)", "*")

	ci := newUser(t, s)
	ci.env = []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=" + issued.Token}
	ci.ok("ls")
	r := ci.fails(3, "", "usage")
	contains(t, "usage outside the scopes", r.stderr, "usage:read")
	r = ci.run("", "lease", "--template", "shell")
	if r.code == 0 || !strings.Contains(r.stderr, "may not lease template") {
		t.Fatalf("restricted lease: exit %d %s", r.code, r.stderr)
	}
	if r := u.run("", "tokens", "create", "x", "--scope", "nonsense"); r.code == 0 || !strings.Contains(r.stderr, "unknown scope") {
		t.Fatalf("unknown scope: exit %d %s", r.code, r.stderr)
	}
}

// A CI job with an OIDC identity runs envlease without any stored token:
// ENVLEASE_OIDC holds the identity token, or GitHub Actions' variables are
// detected and the identity token asked for; the exchanged token is reused
// by the job's later commands.
func TestCIExchangesItsIdentity(t *testing.T) {
	s := clienttest.Start(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var issuer *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": issuer.URL, "jwks_uri": issuer.URL + "/keys"})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	sign := func(aud string) string {
		sg, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
		b, _ := json.Marshal(map[string]any{"iss": issuer.URL, "aud": aud, "sub": "repo:acme/app:ref:refs/heads/main",
			"repository": "acme/app", "ref": "refs/heads/main", "exp": time.Now().Add(5 * time.Minute).Unix(), "iat": time.Now().Unix()})
		obj, _ := sg.Sign(b)
		out, _ := obj.CompactSerialize()
		return out
	}
	// GitHub Actions' token endpoint: the job's request token, the audience asked.
	mux.HandleFunc("/actions-token", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer job-request-token" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"value": sign(r.URL.Query().Get("audience"))})
	})
	issuer = httptest.NewServer(mux)
	t.Cleanup(issuer.Close)

	admin := newUser(t, s)
	admin.login(clienttest.AliceToken)
	out := admin.ok("issuers", "add", "local", "--url", issuer.URL, "--condition", "repository=acme/app",
		"--condition", "ref=refs/heads/*", "--scope", "environments:read", "--scope", "environments:lease", "--lifetime", "10m")
	contains(t, "issuers add", out, "local", issuer.URL, "ref=refs/heads/*,repository=acme/app", "environments:lease,environments:read", "10m")
	var listed struct {
		Issuers []domain.TrustedIssuer `json:"issuers"`
	}
	admin.json(&listed, "issuers", "ls")
	if len(listed.Issuers) != 1 {
		t.Fatalf("issuers %+v", listed.Issuers)
	}

	ci := newUser(t, s)
	ci.env = []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_ORG=acme", "ENVLEASE_OIDC=" + sign("envlease")}
	ci.ok("ls")
	contains(t, "whoami", ci.ok("whoami"), "acme", "SCOPES", "environments:lease,environments:read", "EXPIRES", "in ")
	// The second command reused the first one's exchange.
	exchanged := 0
	var keys struct {
		Keys []domain.APIKey `json:"keys"`
	}
	admin.json(&keys, "keys", "ls")
	for _, k := range keys.Keys {
		if k.Source == "oidc" {
			exchanged++
		}
	}
	if exchanged != 1 {
		t.Fatalf("%d exchanges for two commands", exchanged)
	}

	// What a CI job does with it: a whole run, lease to delete.
	ci.ok("run", "--template", "sleeper", "--", "true")

	gh := newUser(t, s)
	gh.env = []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_ORG=acme",
		"ACTIONS_ID_TOKEN_REQUEST_URL=" + issuer.URL + "/actions-token?api-version=2.0", "ACTIONS_ID_TOKEN_REQUEST_TOKEN=job-request-token"}
	gh.ok("ls")
	tok := strings.TrimSpace(gh.ok("tokens", "exchange"))
	if !strings.HasPrefix(tok, "els_org_") {
		t.Fatalf("tokens exchange printed %q", tok)
	}

	// A job of another repository gets nothing, and is told why.
	evil := newUser(t, s)
	evil.env = []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_ORG=acme", "ENVLEASE_OIDC=" + sign("someone-else")}
	r := evil.run("", "ls")
	if r.code == 0 || !strings.Contains(r.stderr, "audience") {
		t.Fatalf("wrong audience: exit %d %s", r.code, r.stderr)
	}
	admin.ok("issuers", "rm", listed.Issuers[0].ID)
}
