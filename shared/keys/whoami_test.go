package keys_test

import (
	"net/http"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
)

func TestWhoamiNamesTheCallerAndItsKey(t *testing.T) {
	e := newEnv(t)
	var cli issued
	e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"}).JSON(t, &cli)
	var org issued
	e.Do(http.MethodPost, "/v1/keys", apitest.AliceToken, map[string]any{"name": "ci"}).JSON(t, &org)

	type identity struct {
		Organization string         `json:"organization"`
		User         string         `json:"user"`
		Role         string         `json:"role"`
		Key          map[string]any `json:"key"`
	}
	cases := []struct {
		name, token        string
		user, role, keyID  string
		keyName, ownerKind string
	}{
		{"admin's fixture token", apitest.AliceToken, "alice", "admin", "key_fixture_alice_0", "fixture token", "user"},
		{"member's CLI token", cli.Token, "bob", "member", cli.APIKey["id"].(string), "laptop", "user"},
		// An organization key acts for no person, with member rights.
		{"organization key", org.Token, "", "member", org.APIKey["id"].(string), "ci", "organization"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do(http.MethodGet, "/v1/whoami", c.token, nil)
			if r.Status != http.StatusOK {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			var got identity
			r.JSON(t, &got)
			owner, _ := got.Key["owner"].(map[string]any)
			if got.Organization != "acme" || got.User != c.user || got.Role != c.role ||
				got.Key["id"] != c.keyID || got.Key["name"] != c.keyName || owner["kind"] != c.ownerKind {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

func TestWhoamiAfterRevocationIsUnauthorized(t *testing.T) {
	e := newEnv(t)
	var cli issued
	e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "old"}).JSON(t, &cli)
	e.Do(http.MethodDelete, "/v1/keys/"+cli.APIKey["id"].(string), apitest.BobToken, nil)
	if r := e.Do(http.MethodGet, "/v1/whoami", cli.Token, nil); r.Status != http.StatusUnauthorized || r.Code() != "unauthorized" {
		t.Fatalf("revoked token: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodPost, "/v1/whoami", apitest.BobToken, nil); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d %s", r.Status, r.Body)
	}
}
