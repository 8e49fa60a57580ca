package auth_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
)

// Scopes, restrictions and expiry ride on the key record authentication
// reads: a scoped, restricted, expiring token's request costs the
// authenticator exactly the one BatchGetItem an unscoped token's does,
// whether the request is inside its scopes, outside them, or refused by a
// restriction.
func TestScopeChecksAddNoCall(t *testing.T) {
	e := newBlockEnv(t)
	tok := e.issue(t, "/v1/tokens", apitest.BobToken, map[string]any{
		"name": "ci", "scopes": []string{"environments:read", "environments:lease"}, "expiresIn": "1h",
		"restrictions": map[string]any{"templates": []string{"sleeper"}, "labels": map[string]string{"ci": "yes"}},
	})
	// The first use marks lastUsed; what is counted below is steady state.
	if r := e.Do(http.MethodGet, "/v1/environments", tok, nil); r.Status != http.StatusOK {
		t.Fatalf("warm-up: %d %s", r.Status, r.Body)
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"inside its scopes", http.MethodGet, "/v1/environments", nil, http.StatusOK, ""},
		{"outside its scopes", http.MethodGet, "/v1/keys", nil, http.StatusForbidden, "insufficient_scope"},
		{"admin route", http.MethodPost, "/v1/keys", map[string]string{"name": "x"}, http.StatusForbidden, "forbidden"},
		{"restricted template", http.MethodPost, "/v1/environments", map[string]any{"template": "shell", "labels": map[string]string{"ci": "yes"}}, http.StatusForbidden, "restricted"},
		{"restricted label", http.MethodPost, "/v1/environments", map[string]any{"template": "sleeper"}, http.StatusForbidden, "restricted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.counter.Reset()
			r := e.Do(c.method, c.path, tok, c.body)
			if r.Status != c.status || (c.code != "" && r.Code() != c.code) {
				t.Fatalf("%d %s, want %d %s", r.Status, r.Body, c.status, c.code)
			}
			if got := e.counter.Counts(); len(got) != 1 || got["BatchGetItem"] != 1 {
				t.Fatalf("authenticator calls %v, want exactly one BatchGetItem", got)
			}
		})
	}
	// After its expiry: 401 saying so, with the one read and the failure
	// count every refused token costs.
	e.Clock.Advance(time.Hour)
	e.counter.Reset()
	r := e.Do(http.MethodGet, "/v1/environments", tok, nil)
	if r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") != `Bearer error="invalid_token", error_description="token has expired"` {
		t.Fatalf("expired: %d %s %q", r.Status, r.Body, r.Header.Get("WWW-Authenticate"))
	}
	if got := e.counter.Counts(); got["BatchGetItem"] != 1 || got["UpdateItem"] != 1 || len(got) != 2 {
		t.Fatalf("expired token's calls %v", got)
	}
}
