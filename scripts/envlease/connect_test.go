package main

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
)

// An address without a scheme is completed as people mean it: plain HTTP
// for this machine (the dev server), HTTPS for any other host.
func TestWithScheme(t *testing.T) {
	cases := []struct{ in, want string }{
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"localhost:8080/", "http://localhost:8080/"},
		{"[::1]:8080", "http://[::1]:8080"},
		{"api.example.com", "https://api.example.com"},
		{"api.example.com/prod", "https://api.example.com/prod"},
		{"http://api.example.com", "http://api.example.com"},
		{"https://127.0.0.1:8080", "https://127.0.0.1:8080"},
	}
	for _, c := range cases {
		got, said := withScheme("--url", c.in)
		if got != c.want || (said == "") != strings.Contains(c.in, "://") {
			t.Errorf("withScheme(%q) = %q, %q; want %q", c.in, got, said, c.want)
		}
	}
}

// refusing is a transport whose server is not listening yet.
type refusing struct{ calls int }

func (r *refusing) RoundTrip(req *http.Request) (*http.Response, error) {
	r.calls++
	return nil, &url.Error{Op: "Get", URL: req.URL.String(), Err: syscall.ECONNREFUSED}
}

// Only a server on this machine is waited for; elsewhere a refusal is
// reported at once.
func TestStartingServerTransportWaitsOnlyForThisMachine(t *testing.T) {
	cases := []struct {
		url       string
		wait      time.Duration
		manyCalls bool
	}{
		{"http://127.0.0.1:8080/v1/whoami", 600 * time.Millisecond, true},
		{"http://localhost:8080/v1/whoami", 600 * time.Millisecond, true},
		{"https://api.example.com/v1/whoami", 600 * time.Millisecond, false},
		{"http://127.0.0.1:8080/v1/whoami", 0, false},
	}
	for _, c := range cases {
		next := &refusing{}
		said := 0
		tr := &startingServerTransport{next: next, say: func(string, ...any) { said++ }, wait: c.wait}
		req, _ := http.NewRequest(http.MethodGet, c.url, nil)
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: err %v, want the refusal", c.url, err)
		}
		if (next.calls > 1) != c.manyCalls || (said == 1) != c.manyCalls {
			t.Errorf("%s (wait %s): %d attempts, said %d times", c.url, c.wait, next.calls, said)
		}
	}
}

// A refused token's message keeps the service's reason and names the fix.
func TestUnauthorizedText(t *testing.T) {
	cases := []struct{ msg, want string }{
		{"token has expired", "envlease login --url URL"},
		{"token has been revoked", "envlease login --url URL"},
		{"unknown token", "envlease login --url URL"},
		{"malformed bearer token: want 'Authorization: Bearer <token>'", "they start with els_"},
		{"missing bearer token", ""},
	}
	for _, c := range cases {
		e := &client.Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: c.msg}
		got := unauthorizedText(e, e)
		if !strings.Contains(got, c.msg) || (c.want != "" && !strings.Contains(got, c.want)) || (c.want == "" && strings.Contains(got, "\n")) {
			t.Errorf("%q: %q", c.msg, got)
		}
	}
}
