package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

type fakeAuth struct{ p domain.Principal }

func (f fakeAuth) Authenticate(_ context.Context, header, _ string) (domain.Principal, error) {
	if header == "Bearer good-token-0123456789" {
		return f.p, nil
	}
	return domain.Principal{}, domain.Errorf(domain.CodeUnauthorized, "unknown token")
}

func newHandler() http.Handler {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	ok := func(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
		httpapi.WriteJSON(w, 200, map[string]string{"id": r.PathValue("id"), "org": p.OrgID})
		return nil
	}
	return httpapi.New(httpapi.Config{Logger: log, Auth: fakeAuth{domain.Principal{OrgID: "acme", Role: domain.RoleMember, Credential: domain.CredentialCLI}}},
		[]httpapi.Route{
			{Method: "GET", Path: "/v1/things/{id}", Access: httpapi.Member, Handler: ok},
			{Method: "DELETE", Path: "/v1/things/{id}", Access: httpapi.Admin, Handler: ok},
			{Method: "GET", Path: "/v1/public", Access: httpapi.Public, Handler: ok},
			{Method: "GET", Path: "/v1/node", Access: httpapi.Node, Handler: ok},
			{Method: "GET", Path: "/v1/panic", Access: httpapi.Public, Handler: func(http.ResponseWriter, *http.Request, domain.Principal) error {
				panic("secret internal detail")
			}},
			{Method: "GET", Path: "/v1/fail", Access: httpapi.Public, Handler: func(http.ResponseWriter, *http.Request, domain.Principal) error {
				return errors.New("dial tcp 10.0.0.1: secret internal detail")
			}},
		})
}

func TestRouting(t *testing.T) {
	h := newHandler()
	cases := []struct {
		name, method, path, token string
		status                    int
		code, allow, contains     string
	}{
		{"match", "GET", "/v1/things/42", "good-token-0123456789", 200, "", "", `"id":"42"`},
		{"head", "HEAD", "/v1/things/42", "good-token-0123456789", 200, "", "", ""},
		{"unknown path", "GET", "/v1/nothing", "", 404, "not_found", "", "/v1/nothing"},
		// Unclean paths are unknown routes (JSON 404), not ServeMux's HTML redirect.
		{"doubled slash", "POST", "/v1//things/42", "good-token-0123456789", 404, "not_found", "", ""},
		{"dot segment", "GET", "/v1/public/../things/42", "good-token-0123456789", 404, "not_found", "", ""},
		{"trailing slash", "GET", "/v1/things/42/", "good-token-0123456789", 404, "not_found", "", ""},
		{"wrong method", "POST", "/v1/things/42", "", 405, "method_not_allowed", "DELETE, GET, HEAD", "POST"},
		{"no token", "GET", "/v1/things/42", "", 401, "unauthorized", "", ""},
		{"member on admin route", "DELETE", "/v1/things/42", "good-token-0123456789", 403, "forbidden", "", "admin"},
		{"person on node route", "GET", "/v1/node", "good-token-0123456789", 403, "forbidden", "", "node"},
		{"public", "GET", "/v1/public", "", 200, "", "", ""},
		{"panic", "GET", "/v1/panic", "", 500, "internal", "", "internal error"},
		{"plain error", "GET", "/v1/fail", "", 500, "internal", "", "internal error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.path, nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != c.status {
				t.Fatalf("status %d: %s", rec.Code, body)
			}
			if rec.Header().Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			if c.code != "" {
				var e httpapi.ErrorBody
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != c.code || e.Error == "" {
					t.Fatalf("error body %q", body)
				}
			}
			if c.allow != "" && rec.Header().Get("Allow") != c.allow {
				t.Errorf("Allow %q", rec.Header().Get("Allow"))
			}
			if !strings.Contains(body, c.contains) || strings.Contains(body, "secret internal detail") {
				t.Errorf("body %q", body)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	type req struct {
		Name   string            `json:"name"`
		Count  int               `json:"count"`
		Labels map[string]string `json:"labels"`
	}
	cases := []struct {
		body, code, field, contains string
	}{
		{`{"name":"a","count":1}`, "", "", ""},
		{`  {"name":"a"}  `, "", "", ""},
		{`{"name":`, "bad_request", "", "malformed"},
		{`{"name":"a"} {"x":1}`, "bad_request", "", "after"},
		{`{"nam":"a"}`, "bad_request", "nam", `"nam"`},
		{`{"count":"x"}`, "bad_request", "count", "number"},
		{`{"labels":[1]}`, "bad_request", "labels", "object"},
		{`[]`, "bad_request", "", "object"},
		{`null`, "bad_request", "", "object"},
		{``, "bad_request", "", "object"},
	}
	for _, c := range cases {
		var v req
		err := httpapi.DecodeBytes([]byte(c.body), &v)
		if c.code == "" {
			if err != nil {
				t.Errorf("%q: %v", c.body, err)
			}
			continue
		}
		e := domain.AsError(err)
		if string(e.Code) != c.code || e.Field != c.field || !strings.Contains(e.Message, c.contains) {
			t.Errorf("%q: got %+v", c.body, e)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	h := httpapi.New(httpapi.Config{Logger: log}, []httpapi.Route{{Method: "POST", Path: "/v1/x", Access: httpapi.Public,
		Handler: func(w http.ResponseWriter, r *http.Request, _ domain.Principal) error {
			var v map[string]any
			return httpapi.Decode(r, &v)
		}}})
	req := httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{"a":"`+strings.Repeat("x", httpapi.MaxBodyBytes)+`"}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 413 || !strings.Contains(rec.Body.String(), `"too_large"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
}

// FuzzDecodeBytes: no input makes the strict decoder panic or answer with
// anything but success or a client error.
func FuzzDecodeBytes(f *testing.F) {
	for _, s := range []string{`{"name":"a","count":1,"labels":{"k":"v"}}`, `{"name":`, `[]`, `{"a":1}`, "{\"name\":\"\xff\"}", `{"count":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v struct {
			Name   string            `json:"name"`
			Count  int               `json:"count"`
			Labels map[string]string `json:"labels"`
		}
		if err := httpapi.DecodeBytes(b, &v); err != nil {
			if s := httpapi.Status(domain.ErrorCode(err)); s >= 500 {
				t.Fatalf("%q gave %d: %v", b, s, err)
			}
		}
	})
}

// A 401 names the scheme to use (RFC 6750 section 3), and says the token is
// at fault when one was offered; requests that were not refused for their
// credentials carry no challenge.
func TestUnauthorizedCarriesBearerChallenge(t *testing.T) {
	h := newHandler()
	cases := []struct {
		name, path, authorization string
		status                    int
		challenge                 string
	}{
		{"no header", "/v1/things/1", "", 401, "Bearer"},
		{"unknown token", "/v1/things/1", "Bearer wrong-token-0123456789", 401, `Bearer error="invalid_token"`},
		{"malformed token", "/v1/things/1", "bearer x", 401, `Bearer error="invalid_token"`},
		{"empty token", "/v1/things/1", "Bearer ", 401, "Bearer"},
		{"other scheme", "/v1/things/1", "Basic dXNlcjpwYXNz", 401, "Bearer"},
		{"scheme without a separator", "/v1/things/1", "Bearerxyz0123456789abcdef", 401, "Bearer"},
		{"good token", "/v1/things/1", "Bearer good-token-0123456789", 200, ""},
		{"forbidden", "/v1/node", "Bearer good-token-0123456789", 403, ""},
		{"public", "/v1/public", "", 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", c.path, nil)
			if c.authorization != "" {
				req.Header.Set("Authorization", c.authorization)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.status {
				t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
			}
			want := []string{}
			if c.challenge != "" {
				want = []string{c.challenge}
			}
			if got := rec.Header().Values("WWW-Authenticate"); strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
				t.Fatalf("WWW-Authenticate %q, want %q", got, want)
			}
		})
	}
}
