package secrets_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/httpapi"
)

func TestMain(m *testing.M) { os.Exit(devstack.RunTests(m)) }

// The API: admins set (write-only: no answer holds the value), members
// list names with the templates that bind them, bad names and values are
// 422 naming the problem, each set and delete is an event, a member cannot
// set, a token without secrets:write cannot either; a template's lease
// waits for its secrets (422 naming the one not set).
func TestSecretsAPI(t *testing.T) {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, nil) })
	ctx := context.Background()
	tpl := domain.Template{Name: "ci", Network: domain.NetworkOpen, Command: []string{"true"}, Pools: []string{"local"},
		Quota: domain.Quota{MaxLeases: 2}, Timeouts: domain.Timeouts{Idle: domain.Duration(3600e9), Hard: domain.Duration(3600e9)},
		Secrets: []domain.SecretBinding{{Secret: "GITHUB_TOKEN", Hosts: []string{"api.github.com"}, Header: "Authorization: Bearer {secret}"}}}
	if err := e.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
	if r := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "ci"}); r.Status != 422 || !strings.Contains(string(r.Body), "GITHUB_TOKEN") {
		t.Fatalf("lease with the secret not set: %d %s", r.Status, r.Body)
	}
	const value = "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
	r := e.Do(http.MethodPut, "/v1/secrets/GITHUB_TOKEN", apitest.AliceToken, map[string]any{"value": value})
	if r.Status != 200 || strings.Contains(string(r.Body), value) || !strings.Contains(string(r.Body), `"templates":["ci"]`) {
		t.Fatalf("set: %d %s", r.Status, r.Body)
	}
	for _, c := range []struct {
		name, value, want string
	}{
		{"9LIVES", "v", "name"}, {"has-dash", "v", "name"}, {"OK", "", "empty"}, {"OK", "a\nb", "control character"},
		{"OK", strings.Repeat("x", domain.MaxSecretValue+1), "at most"},
	} {
		r := e.Do(http.MethodPut, "/v1/secrets/"+c.name, apitest.AliceToken, map[string]any{"value": c.value})
		if r.Status != 422 || !strings.Contains(string(r.Body), c.want) {
			t.Errorf("set %q=%q: %d %s, want 422 naming %q", c.name, c.value, r.Status, r.Body, c.want)
		}
	}
	if r := e.Do(http.MethodPut, "/v1/secrets/MINE", apitest.BobToken, map[string]any{"value": "v"}); r.Status != 403 {
		t.Fatalf("a member set a secret: %d %s", r.Status, r.Body)
	}
	for _, tok := range []string{apitest.AliceToken, apitest.BobToken} {
		r := e.Do(http.MethodGet, "/v1/secrets", tok, nil)
		if r.Status != 200 || strings.Contains(string(r.Body), value) || !strings.Contains(string(r.Body), `"name":"GITHUB_TOKEN"`) || !strings.Contains(string(r.Body), `"setBy":"alice"`) {
			t.Fatalf("list: %d %s", r.Status, r.Body)
		}
	}
	if r := e.Do(http.MethodGet, "/v1/secrets/GITHUB_TOKEN", apitest.BobToken, nil); r.Status != 200 || strings.Contains(string(r.Body), value) {
		t.Fatalf("get: %d %s", r.Status, r.Body)
	}
	// An admin's token with only secrets:read cannot set.
	tok := e.Do(http.MethodPost, "/v1/tokens", apitest.AliceToken, map[string]any{"name": "ro", "scopes": []string{"secrets:read"}})
	var issued struct{ Token string }
	tok.JSON(t, &issued)
	if r := e.Do(http.MethodPut, "/v1/secrets/GITHUB_TOKEN", issued.Token, map[string]any{"value": "v"}); r.Status != 403 || !strings.Contains(string(r.Body), "secrets:write") {
		t.Fatalf("set with secrets:read only: %d %s", r.Status, r.Body)
	}
	// A member cannot hold secrets:write.
	if r := e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "w", "scopes": []string{"secrets:write"}}); r.Status != 403 {
		t.Fatalf("a member's token with secrets:write: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "ci"}); r.Status != 201 {
		t.Fatalf("lease with the secret set: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodDelete, "/v1/secrets/GITHUB_TOKEN", apitest.AliceToken, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodDelete, "/v1/secrets/GITHUB_TOKEN", apitest.AliceToken, nil); r.Status != 404 {
		t.Fatalf("delete again: %d %s", r.Status, r.Body)
	}
	ev := e.Do(http.MethodGet, "/v1/events?type=secret.", apitest.AliceToken, nil)
	if ev.Status != 200 || !strings.Contains(string(ev.Body), "secret.set") || !strings.Contains(string(ev.Body), "secret.deleted") || strings.Contains(string(ev.Body), value) {
		t.Fatalf("events: %d %s", ev.Status, ev.Body)
	}
}

// Template bindings are checked where templates are applied: 422-style
// errors naming the binding's field.
func TestBindingsInFixture(t *testing.T) {
	base := `{"orgs": [{"id": "acme", "name": "Acme", "pools": ["local"], "templates": [{"name": "ci", "command": ["true"], "pools": ["local"],
	  "timeouts": {"idle": "1h", "hard": "1h"}, "quota": {"maxLeases": 1}, "network": %s, "secrets": [%s]}]}]}`
	for _, c := range []struct{ network, binding, want string }{
		{`"open"`, `{"secret": "GITHUB_TOKEN", "hosts": ["api.github.com"], "header": "Authorization: Bearer {secret}"}`, ""},
		{`"rules"`, `{"secret": "REGISTRY", "hosts": ["registry.example.com"], "basicAuth": {"user": "ci"}}`, ""},
		{`"none"`, `{"secret": "GITHUB_TOKEN", "hosts": ["api.github.com"], "header": "Authorization: Bearer {secret}"}`, "network"},
		{`"open"`, `{"secret": "GITHUB_TOKEN", "hosts": ["api.github.com"], "header": "Authorization: Bearer"}`, "{secret}"},
		{`"open"`, `{"secret": "GITHUB_TOKEN", "hosts": ["*.github.com"], "header": "Authorization: Bearer {secret}"}`, "wildcards"},
		{`"open"`, `{"secret": "GITHUB_TOKEN", "hosts": []}`, "hosts"},
		{`"open"`, `{"secret": "bad-name", "hosts": ["a.example"], "header": "X: {secret}"}`, "secret"},
		{`"open"`, `{"secret": "T", "hosts": ["a.example"]}`, "header"},
	} {
		_, err := fixture.Parse([]byte(strings.Replace(strings.Replace(base, "%s", c.network, 1), "%s", c.binding, 1)))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.binding, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error naming %q", c.binding, err, c.want)
		}
	}
}
