// Package openapi holds the API description (openapi.yaml, OpenAPI 3.1) and
// serves it. The document is the contract the handlers are checked against:
// package check validates every response of the handler tests against it, and
// TestLint runs a pinned OpenAPI linter over it.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// YAML is the document as written.
//
//go:embed openapi.yaml
var YAML []byte

var (
	jsonOnce sync.Once
	jsonDoc  []byte
	jsonErr  error
)

// JSON returns the document converted to JSON. It is converted once, from
// the same embedded bytes, so the two routes can never disagree.
func JSON() ([]byte, error) {
	jsonOnce.Do(func() {
		var v any
		if jsonErr = yaml.Unmarshal(YAML, &v); jsonErr != nil {
			return
		}
		v, jsonErr = jsonable(v)
		if jsonErr != nil {
			return
		}
		jsonDoc, jsonErr = json.MarshalIndent(v, "", "  ")
	})
	return jsonDoc, jsonErr
}

// jsonable turns what yaml.v3 decodes into values encoding/json accepts:
// mapping keys must be strings (a response code written unquoted would be an
// int key, which JSON cannot carry, so it is refused rather than guessed).
func jsonable(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("openapi.yaml: mapping key %v is not a string; quote it", k)
			}
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		for i, e := range t {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	}
	return v, nil
}

// cacheControl lets clients and CDNs keep the document for a while; it only
// changes with a deploy.
const cacheControl = "public, max-age=300"

// Routes is the docs group: the document as JSON and as YAML, with no token,
// so tools can fetch it before a client has credentials.
func Routes() []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/v1/openapi.json", Access: httpapi.Public, Handler: serveJSON},
		{Method: http.MethodGet, Path: "/v1/openapi.yaml", Access: httpapi.Public, Handler: serveYAML},
	}
}

func serveJSON(w http.ResponseWriter, _ *http.Request, _ domain.Principal) error {
	b, err := JSON()
	if err != nil {
		return domain.Internal(err)
	}
	write(w, "application/json", b)
	return nil
}

func serveYAML(w http.ResponseWriter, _ *http.Request, _ domain.Principal) error {
	write(w, "application/yaml", YAML)
	return nil
}

func write(w http.ResponseWriter, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", cacheControl)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // the client went away; nothing useful to do
}
