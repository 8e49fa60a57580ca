package templates_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/templates"
)

func newEnv(t *testing.T) *apitest.Env {
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		svc := templates.NewService(e.Store)
		return [][]httpapi.Route{templates.Routes(svc), templates.QuotaRoutes(svc)}
	})
}

// kind names the JSON type of a decoded value.
func kind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "integer"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case nil:
		return "null"
	}
	return "?"
}

func TestTemplatesHaveEverySpecFieldInItsType(t *testing.T) {
	e := newEnv(t)
	r := e.Do(http.MethodGet, "/v1/templates", apitest.BobToken, nil)
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var out struct {
		Templates []map[string]any `json:"templates"`
		Pools     []any            `json:"pools"`
	}
	r.JSON(t, &out)
	if len(out.Templates) != 2 || out.Templates[0]["name"] != "shell" || out.Templates[1]["name"] != "sleeper" {
		t.Fatalf("acme's templates: %s", r.Body)
	}
	if len(out.Pools) != 1 || out.Pools[0] != "local" {
		t.Fatalf("pools %v", out.Pools)
	}
	spec := map[string]string{
		"name": "string", "description": "string", "command": "array", "env": "object", "workdir": "string",
		"exports": "object", "shares": "array", "writable": "array", "resources": "object", "runtime": "string",
		"restart": "string", "timeouts": "object", "warm": "integer", "platforms": "array", "buildCache": "boolean",
	}
	for _, tm := range out.Templates {
		for f, want := range spec {
			if got := kind(tm[f]); got != want {
				t.Errorf("template %s: %s is %s, want %s", tm["name"], f, got, want)
			}
		}
		res := tm["resources"].(map[string]any)
		if kind(res["cpus"]) != "integer" || kind(res["memory"]) != "string" || kind(res["pids"]) != "integer" {
			t.Errorf("resources %v", res)
		}
		to := tm["timeouts"].(map[string]any)
		if kind(to["idle"]) != "string" || kind(to["hard"]) != "string" {
			t.Errorf("timeouts %v", to)
		}
		for _, s := range tm["shares"].([]any) {
			sh := s.(map[string]any)
			if kind(sh["name"]) != "string" || kind(sh["path"]) != "string" || kind(sh["direction"]) != "string" || kind(sh["exclude"]) != "array" {
				t.Errorf("share %v", sh)
			}
		}
	}
	shell := out.Templates[0]
	if shell["timeouts"].(map[string]any)["idle"] != "30m" || shell["timeouts"].(map[string]any)["hard"] != "6h" {
		t.Errorf("shell timeouts %v", shell["timeouts"])
	}
	// Globex sees only its own.
	var g struct {
		Templates []map[string]any `json:"templates"`
	}
	e.Do(http.MethodGet, "/v1/templates", apitest.CarolToken, nil).JSON(t, &g)
	if len(g.Templates) != 1 || g.Templates[0]["description"] != "Globex's shell" {
		t.Fatalf("globex templates %v", g.Templates)
	}
}

func TestQuotas(t *testing.T) {
	e := newEnv(t)
	r := e.Do(http.MethodGet, "/v1/quotas", apitest.BobToken, nil)
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	want := `{"quotas":[` +
		`{"template":"shell","maxLeases":2,"running":0,"idle":"30m","hard":"6h"},` +
		`{"template":"sleeper","maxLeases":3,"running":0,"idle":"10m","hard":"1h"}]}`
	if got := strings.TrimSpace(string(r.Body)); got != want {
		t.Fatalf("quotas\n got %s\nwant %s", got, want)
	}
}
