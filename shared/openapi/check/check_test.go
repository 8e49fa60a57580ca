package check_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/openapi/check"
)

const env = `{"id":"env_1","name":"n","template":"shell","state":"pending","node":"","sandbox":"","pool":"local",
"labels":{},"project":"","readyMs":null,"error":"","createdBy":"bob","created":"2026-03-14T09:00:00Z","ready":null,"stopped":null,
"expires":"2026-03-14T15:00:00Z","idleUntil":"2026-03-14T09:30:00Z","idle":"30m","hard":"6h","exports":[],"shares":[],
"snapshot":"","restored":null,"stopReason":""}`

func jsonHeader(extra ...string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return h
}

// The validator must refuse what the document does not describe; otherwise
// the handler tests that run it prove nothing.
func TestValidatorRefusesUndescribedResponses(t *testing.T) {
	v, err := check.Default()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path string
		status             int
		header             http.Header
		body, wantErr      string
	}{
		{"described environment", "GET", "/v1/environments/env_1", 200, jsonHeader(), env, ""},
		{"wrapped environment", "GET", "/v1/environments/env_1", 200, jsonHeader(), `{"environment":` + env + `}`, `"environment"`},
		{"wrapped environment on touch", "POST", "/v1/environments/env_1/touch", 200, jsonHeader(), `{"environment":` + env + `}`, `"environment"`},
		{"HEAD of a GET", "HEAD", "/v1/environments/env_1", 200, jsonHeader(), "", ""},
		{"field not described", "GET", "/v1/environments/env_1", 200, jsonHeader(),
			strings.Replace(env, `"stopReason":""`, `"stopReason":"","secret":"x"`, 1), "secret"},
		{"required field missing", "GET", "/v1/environments/env_1", 200, jsonHeader(),
			strings.Replace(env, `"node":"",`, "", 1), "node"},
		{"null where not nullable", "GET", "/v1/environments/env_1", 200, jsonHeader(),
			strings.Replace(env, `"expires":"2026-03-14T15:00:00Z"`, `"expires":null`, 1), "expires"},
		{"state outside the enum", "GET", "/v1/environments/env_1", 200, jsonHeader(),
			strings.Replace(env, `"pending"`, `"sleeping"`, 1), "state"},
		{"status not listed", "GET", "/v1/environments/env_1", 418, jsonHeader(), `{"error":"x","code":"teapot"}`, "status"},
		{"error code of another status", "GET", "/v1/environments/env_1", 404, jsonHeader(), `{"error":"x","code":"gone"}`, "code"},
		{"503 without Retry-After", "GET", "/v1/environments/env_1", 503, jsonHeader(),
			`{"error":"x","code":"unavailable"}`, "Retry-After"},
		{"503 with Retry-After", "GET", "/v1/environments/env_1", 503, jsonHeader("Retry-After", "2"),
			`{"error":"x","code":"unavailable"}`, ""},
		{"not JSON", "GET", "/v1/environments/env_1", 200, http.Header{"Content-Type": {"text/plain"}}, "hello", "Content-Type"},
		{"unknown path is the JSON 404", "GET", "/v1/nope", 404, jsonHeader(), `{"error":"no such endpoint","code":"not_found"}`, ""},
		{"unknown path answering 200", "GET", "/v1/nope", 200, jsonHeader(), `{}`, "404"},
		{"unknown method is the JSON 405", "PUT", "/v1/environments/env_1", 405, jsonHeader("Allow", "DELETE, GET, HEAD"),
			`{"error":"x","code":"method_not_allowed"}`, ""},
		{"405 without Allow", "PUT", "/v1/environments/env_1", 405, jsonHeader(), `{"error":"x","code":"method_not_allowed"}`, "Allow"},
		{"described query parameters", "GET", "/v1/environments?state=live&limit=2&cursor=x", 200, jsonHeader(),
			`{"environments":[]}`, ""},
		{"query parameter not described", "GET", "/v1/environments?page=2", 200, jsonHeader(), `{"environments":[]}`, "page"},
		{"quota 429 on lease", "POST", "/v1/environments", 429, jsonHeader(), `{"error":"x","code":"quota"}`, ""},
		{"quota 429 elsewhere", "GET", "/v1/environments", 429, jsonHeader("Retry-After", "60"), `{"error":"x","code":"quota"}`, "code"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.path, nil)
			err := v.Response(req, c.status, c.header, []byte(c.body))
			if c.wantErr == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("want an error naming %q, got %v", c.wantErr, err)
			}
		})
	}
}
