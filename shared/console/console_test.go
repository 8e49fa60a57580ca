package console_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/console"
	"github.com/envlease/envlease/shared/httpapi"
)

// Every console answer carries the policy and headers that keep the page
// safe, with no token needed; an unknown file is the service's JSON 404.
func TestConsoleHeaders(t *testing.T) {
	h := httpapi.New(httpapi.Config{Logger: apitest.DiscardLogger()}, console.Routes(console.Options{S3Origin: "http://127.0.0.1:9000"}))
	for _, p := range []string{"/", "/console/app.js", "/console/style.css", "/console/environments.js"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		res := rec.Result()
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", p, res.StatusCode)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self' http://127.0.0.1:9000",
			"frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: policy %q lacks %q", p, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("%s: policy %q allows unsafe sources", p, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", p, res.Header)
		}
		// A revisit costs a 304.
		rec = httptest.NewRecorder()
		req := httptest.NewRequest("GET", p, nil)
		req.Header.Set("If-None-Match", res.Header.Get("ETag"))
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotModified {
			t.Errorf("%s with its ETag: %d", p, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/console/nope.js", nil))
	if rec.Code != 404 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Errorf("unknown file: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
}

// The page runs nothing inline: no inline script, no style or event
// attributes, which the policy would refuse anyway.
func TestConsoleHasNoInlineCode(t *testing.T) {
	h := httpapi.New(httpapi.Config{Logger: apitest.DiscardLogger()}, console.Routes(console.Options{}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	page := rec.Body.String()
	for _, bad := range []string{"<script>", " style=", " onclick=", " onload=", "<style"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page has %q", bad)
		}
	}
}
