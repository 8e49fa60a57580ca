package openapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/openapi"
)

func newEnv(t *testing.T) *apitest.Env {
	return apitest.New(t, func(*apitest.Env) [][]httpapi.Route { return [][]httpapi.Route{openapi.Routes()} })
}

// Both routes serve the one embedded document, with no token.
func TestServeDocument(t *testing.T) {
	e := newEnv(t)
	j := e.Do(http.MethodGet, "/v1/openapi.json", "", nil)
	if j.Status != 200 || j.Header.Get("Content-Type") != "application/json" || j.Header.Get("Cache-Control") == "" {
		t.Fatalf("json: %d %v", j.Status, j.Header)
	}
	y := e.Do(http.MethodGet, "/v1/openapi.yaml", "", nil)
	if y.Status != 200 || y.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(y.Body, openapi.YAML) {
		t.Fatalf("yaml: %d %v", y.Status, y.Header)
	}
	var fromJSON, fromYAML any
	j.JSON(t, &fromJSON)
	if err := yaml.Unmarshal(y.Body, &fromYAML); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromJSON)
	b, _ := json.Marshal(fromYAML)
	if !bytes.Equal(a, b) {
		t.Fatal("the JSON and YAML documents differ")
	}
	if v := fromJSON.(map[string]any)["openapi"]; v != "3.1.0" {
		t.Fatalf("openapi %v", v)
	}
	// A token is not needed, and a bad one does not matter: the routes are public.
	if r := e.Do(http.MethodGet, "/v1/openapi.json", "nonsense", nil); r.Status != 200 {
		t.Fatalf("with a bad token: %d", r.Status)
	}
	if r := e.Do(http.MethodHead, "/v1/openapi.yaml", "", nil); r.Status != 200 {
		t.Fatalf("HEAD: %d", r.Status)
	}
	if r := e.Do(http.MethodPost, "/v1/openapi.json", "", "{}"); r.Status != 405 || r.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d %v", r.Status, r.Header)
	}
	if r := e.Do(http.MethodGet, "/v1/openapi", "", nil); r.Status != 404 || r.Code() != "not_found" {
		t.Fatalf("unknown path: %d %s", r.Status, r.Body)
	}
}
