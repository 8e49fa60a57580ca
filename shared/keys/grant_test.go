package keys_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// create posts body to path as token and returns the status, code, token
// and record.
func create(t *testing.T, e *apitest.Env, path, token string, body map[string]any) (int, string, string, domain.APIKey) {
	t.Helper()
	r := e.Do(http.MethodPost, path, token, body)
	var out struct {
		Token  string        `json:"token"`
		APIKey domain.APIKey `json:"apiKey"`
	}
	if r.Status == http.StatusCreated {
		r.JSON(t, &out)
	}
	return r.Status, r.Code(), out.Token, out.APIKey
}

func TestGrantRules(t *testing.T) {
	e := newEnv(t)
	_, _, scoped, _ := create(t, e, "/v1/tokens", apitest.BobToken, map[string]any{
		"name": "ci", "scopes": []string{"environments:lease", "tokens:write"}, "expiresIn": "2h",
		"restrictions": map[string]any{"templates": []string{"sleeper"}},
	})
	if scoped == "" {
		t.Fatal("no scoped token")
	}
	cases := []struct {
		name, path, token string
		body              map[string]any
		status            int
		code              string
	}{
		{"member asks for admin", "/v1/tokens", apitest.BobToken, map[string]any{"name": "x", "scopes": []string{"admin"}}, 403, "forbidden"},
		{"admin asks for admin", "/v1/tokens", apitest.AliceToken, map[string]any{"name": "x", "scopes": []string{"admin"}}, 201, ""},
		{"org key asks for admin", "/v1/keys", apitest.AliceToken, map[string]any{"name": "x", "scopes": []string{"admin"}}, 403, "forbidden"},
		{"org key with scopes", "/v1/keys", apitest.AliceToken, map[string]any{"name": "x", "scopes": []string{"environments:lease"}, "expiresIn": "24h"}, 201, ""},
		{"unknown scope", "/v1/tokens", apitest.BobToken, map[string]any{"name": "x", "scopes": []string{"everything"}}, 422, "invalid"},
		{"no scope at all", "/v1/tokens", apitest.BobToken, map[string]any{"name": "x", "scopes": []string{}}, 422, "invalid"},
		{"bad expiry", "/v1/tokens", apitest.BobToken, map[string]any{"name": "x", "expiresIn": "soon"}, 422, "invalid"},
		{"too short expiry", "/v1/tokens", apitest.BobToken, map[string]any{"name": "x", "expiresIn": "1s"}, 422, "invalid"},
		{"bad restriction label", "/v1/tokens", apitest.BobToken, map[string]any{"name": "x", "restrictions": map[string]any{"labels": map[string]string{"Bad Key!": "v"}}}, 422, "invalid"},
		{"scoped caller widens scopes", "/v1/tokens", scoped, map[string]any{"name": "x", "scopes": []string{"usage:read"}}, 403, "insufficient_scope"},
		{"scoped caller widens restrictions", "/v1/tokens", scoped, map[string]any{"name": "x", "restrictions": map[string]any{"templates": []string{"shell"}}}, 403, "restricted"},
		{"scoped caller narrows", "/v1/tokens", scoped, map[string]any{"name": "x", "scopes": []string{"environments:lease"}}, 201, ""},
		{"scoped caller cannot list keys", "/v1/keys", scoped, nil, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.status == 0 {
				r := e.Do(http.MethodGet, c.path, c.token, nil)
				if r.Status != 403 || r.Code() != "insufficient_scope" || r.Header.Get("WWW-Authenticate") != `Bearer error="insufficient_scope", scope="tokens:read"` {
					t.Fatalf("%d %s %q", r.Status, r.Body, r.Header.Get("WWW-Authenticate"))
				}
				return
			}
			status, code, _, _ := create(t, e, c.path, c.token, c.body)
			if status != c.status || code != c.code {
				t.Fatalf("%d %q, want %d %q", status, code, c.status, c.code)
			}
		})
	}
}

// A token minted by a scoped token inherits its scopes, restrictions and
// end when it asks for none; the listing shows them.
func TestScopedTokenMintsNoWiderToken(t *testing.T) {
	e := newEnv(t)
	_, _, scoped, parent := create(t, e, "/v1/tokens", apitest.BobToken, map[string]any{
		"name": "ci", "scopes": []string{"environments:lease", "tokens:write"}, "expiresIn": "2h",
		"restrictions": map[string]any{"templates": []string{"sleeper"}, "labels": map[string]string{"ci": "yes"}},
	})
	status, _, _, child := create(t, e, "/v1/tokens", scoped, map[string]any{"name": "child", "expiresIn": "48h"})
	if status != 201 {
		t.Fatalf("child: %d", status)
	}
	if len(child.Scopes) != 2 || child.Restrictions == nil || child.Restrictions.Templates[0] != "sleeper" || child.Restrictions.Labels["ci"] != "yes" {
		t.Fatalf("child record %+v %+v", child.Scopes, child.Restrictions)
	}
	if child.Expires == nil || !child.Expires.Equal(*parent.Expires) {
		t.Fatalf("child expires %v, parent %v", child.Expires, parent.Expires)
	}
	var listed struct {
		Keys []domain.APIKey `json:"keys"`
	}
	e.Do(http.MethodGet, "/v1/keys", apitest.BobToken, nil).JSON(t, &listed)
	found := 0
	for _, k := range listed.Keys {
		if k.ID == parent.ID || k.ID == child.ID {
			found++
			if k.Scopes == nil || k.Expires == nil || k.Restrictions == nil {
				t.Errorf("listing lacks the grant: %+v", k)
			}
		}
	}
	if found != 2 {
		t.Fatalf("listed %d of 2", found)
	}
}

// The organization's maximum lifetime caps expiresIn and gives a token
// asked for without one that maximum; tokens without scopes keep every
// right.
func TestOrganizationMaxLifetime(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org, err := e.Store.GetOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	org.MaxTokenLifetime = domain.Duration(24 * time.Hour)
	if err := e.Store.PutOrg(ctx, org); err != nil {
		t.Fatal(err)
	}
	if status, code, _, _ := create(t, e, "/v1/tokens", apitest.BobToken, map[string]any{"name": "x", "expiresIn": "48h"}); status != 422 || code != "invalid" {
		t.Fatalf("beyond the maximum: %d %s", status, code)
	}
	status, _, tok, k := create(t, e, "/v1/tokens", apitest.BobToken, map[string]any{"name": "x"})
	if status != 201 || k.Expires == nil || !k.Expires.Equal(apitest.Start.Add(24*time.Hour)) {
		t.Fatalf("without expiresIn: %d %v", status, k.Expires)
	}
	if k.Scopes != nil {
		t.Fatalf("scopes %v", k.Scopes)
	}
	if r := e.Do(http.MethodGet, "/v1/whoami", tok, nil); r.Status != 200 {
		t.Fatalf("whoami: %d", r.Status)
	}
	e.Clock.Advance(24 * time.Hour)
	r := e.Do(http.MethodGet, "/v1/whoami", tok, nil)
	if r.Status != 401 || r.Header.Get("WWW-Authenticate") != `Bearer error="invalid_token", error_description="token has expired"` {
		t.Fatalf("expired: %d %s %q", r.Status, r.Body, r.Header.Get("WWW-Authenticate"))
	}
}

// An organization key made by an admin's scoped token without scopes of its
// own inherits them, but never the admin scope: the key acts as a member.
func TestOrgKeyDoesNotInheritAdminScope(t *testing.T) {
	e := newEnv(t)
	_, _, admin, _ := create(t, e, "/v1/tokens", apitest.AliceToken, map[string]any{
		"name": "ops", "scopes": []string{"admin", "environments:read"},
	})
	if admin == "" {
		t.Fatal("no scoped admin token")
	}
	status, code, _, k := create(t, e, "/v1/keys", admin, map[string]any{"name": "ci"})
	if status != http.StatusCreated {
		t.Fatalf("org key from a scoped admin token: %d %s", status, code)
	}
	if len(k.Scopes) != 1 || k.Scopes[0] != "environments:read" {
		t.Errorf("org key scopes %v, want [environments:read]", k.Scopes)
	}
	_, _, only, _ := create(t, e, "/v1/tokens", apitest.AliceToken, map[string]any{"name": "ops2", "scopes": []string{"admin"}})
	if status, code, _, _ := create(t, e, "/v1/keys", only, map[string]any{"name": "ci2"}); status != http.StatusUnprocessableEntity || code != "invalid" {
		t.Errorf("org key from an admin-only token: %d %s, want 422 invalid", status, code)
	}
}

// A restricted token without scopes is limited too: what it mints does not
// outlive it.
func TestRestrictedTokenMintsNothingLongerLived(t *testing.T) {
	e := newEnv(t)
	_, _, restricted, parent := create(t, e, "/v1/tokens", apitest.BobToken, map[string]any{
		"name": "ci", "expiresIn": "2h", "restrictions": map[string]any{"templates": []string{"sleeper"}},
	})
	if restricted == "" || parent.Expires == nil {
		t.Fatal("no restricted token")
	}
	status, _, _, child := create(t, e, "/v1/tokens", restricted, map[string]any{"name": "child"})
	if status != 201 {
		t.Fatalf("child: %d", status)
	}
	if child.Expires == nil || !child.Expires.Equal(*parent.Expires) || child.Restrictions == nil {
		t.Fatalf("child expires %v restrictions %+v; parent expires %v", child.Expires, child.Restrictions, parent.Expires)
	}
}
