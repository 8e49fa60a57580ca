package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
)

// recorder stands in for the wait between retries: it notes each wait and
// returns at once, so retry tests neither sleep nor read a clock.
type recorder struct {
	mu     sync.Mutex
	waits  []time.Duration
	cancel context.CancelFunc // when set, called on the first wait
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	cancel := r.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return ctx.Err()
}

// answer is one canned response.
type answer struct {
	status int
	header map[string]string
	body   string
}

// script serves the answers in order (the last one repeats) and records
// every request it got.
type script struct {
	mu       sync.Mutex
	answers  []answer
	requests []*http.Request
	bodies   []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, r)
	s.bodies = append(s.bodies, string(b))
	a := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func newClient(t *testing.T, h http.Handler, opts ...client.Option) (*client.Client, *recorder) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	rec := &recorder{}
	c, err := client.New(srv.URL, "els_cli_test", append([]client.Option{client.WithHTTPClient(srv.Client()), client.WithSleep(rec.sleep)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

func TestErrorDecoding(t *testing.T) {
	cases := []struct {
		name string
		ans  answer
		want client.Error
		text string
	}{
		{"API error with field and request id",
			answer{422, map[string]string{"X-Request-Id": "req-1"}, `{"error":"unknown template \"nope\"","code":"invalid","field":"template"}`},
			client.Error{Status: 422, Code: "invalid", Message: `unknown template "nope"`, Field: "template", RequestID: "req-1"},
			`unknown template "nope" (422 invalid, request req-1)`},
		{"quota",
			answer{429, map[string]string{"X-Request-Id": "req-2"}, `{"error":"quota reached","code":"quota"}`},
			client.Error{Status: 429, Code: "quota", Message: "quota reached", RequestID: "req-2"},
			"quota reached (429 quota, request req-2)"},
		{"locked, with Retry-After",
			answer{429, map[string]string{"Retry-After": "60"}, `{"error":"too many failed attempts","code":"locked"}`},
			client.Error{Status: 429, Code: "locked", Message: "too many failed attempts", RetryAfter: time.Minute},
			"too many failed attempts (429 locked)"},
		{"fields added to the error body are tolerated",
			answer{404, nil, `{"error":"environment not found","code":"not_found","hint":"new"}`},
			client.Error{Status: 404, Code: "not_found", Message: "environment not found"},
			"environment not found (404 not_found)"},
		{"API Gateway's own answer",
			answer{500, map[string]string{"Apigw-Requestid": "gw-9"}, `{"message":"Internal Server Error"}`},
			client.Error{Status: 500, Message: "Internal Server Error", RequestID: "gw-9"},
			"Internal Server Error (500, request gw-9)"},
		{"a proxy's HTML page",
			answer{403, nil, `<html><body>Forbidden by proxy</body></html>`},
			client.Error{Status: 403, Message: "Forbidden"},
			"Forbidden (403)"},
		{"no body", answer{401, nil, ""},
			client.Error{Status: 401, Message: "Unauthorized"}, "Unauthorized (401)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, _ := newClient(t, &script{answers: []answer{c.ans}})
			_, err := cl.GetEnvironment(context.Background(), "env_1")
			e, ok := client.AsError(err)
			if !ok {
				t.Fatalf("error %T %v is not a *client.Error", err, err)
			}
			if *e != c.want {
				t.Fatalf("got %+v\nwant %+v", *e, c.want)
			}
			if err.Error() != c.text {
				t.Fatalf("text %q, want %q", err.Error(), c.text)
			}
			if client.StatusOf(err) != c.want.Status || client.CodeOf(err) != c.want.Code {
				t.Fatalf("StatusOf %d CodeOf %q", client.StatusOf(err), client.CodeOf(err))
			}
		})
	}
}

func TestRetries(t *testing.T) {
	unavailable := answer{503, map[string]string{"Retry-After": "2"}, `{"error":"the table is unavailable","code":"unavailable"}`}
	badGateway := answer{502, nil, `{"message":"Bad Gateway"}`}
	okEnv := answer{200, nil, `{"id":"env_1","state":"ready"}`}
	leased := answer{201, nil, `{"environment":{"id":"env_1","state":"pending"},"config":{}}`}
	get := func(c *client.Client) error { _, err := c.GetEnvironment(context.Background(), "env_1"); return err }
	cases := []struct {
		name     string
		answers  []answer
		call     func(*client.Client) error
		opts     []client.Option
		attempts int
		waits    []time.Duration
		status   int // of the error; 0 for success
	}{
		{"503 with Retry-After, then success", []answer{unavailable, okEnv}, get, nil,
			2, []time.Duration{2 * time.Second}, 0},
		{"502 without Retry-After backs off doubling", []answer{badGateway, badGateway, badGateway, okEnv}, get, nil,
			4, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, 0},
		{"attempts are bounded", []answer{unavailable}, get, nil,
			4, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}, 503},
		{"WithMaxAttempts(1) turns retries off", []answer{unavailable}, get, []client.Option{client.WithMaxAttempts(1)},
			1, nil, 503},
		{"Retry-After as an HTTP date in the past: backoff", []answer{{503, map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, ""}, okEnv}, get, nil,
			2, []time.Duration{time.Second}, 0},
		{"a wait longer than the bound is not waited for", []answer{{503, map[string]string{"Retry-After": "120"}, ""}}, get, nil,
			1, nil, 503},
		{"500 is not retried", []answer{{500, nil, `{"error":"internal error","code":"internal"}`}}, get, nil,
			1, nil, 500},
		{"429 quota is not retried", []answer{{429, nil, `{"error":"quota reached","code":"quota"}`}}, get, nil,
			1, nil, 429},
		{"DELETE is retried", []answer{unavailable, okEnv}, func(c *client.Client) error {
			_, err := c.DeleteEnvironment(context.Background(), "env_1")
			return err
		}, nil, 2, []time.Duration{2 * time.Second}, 0},
		{"touch (a POST that is safe to repeat) is retried", []answer{badGateway, okEnv}, func(c *client.Client) error {
			_, err := c.TouchEnvironment(context.Background(), "env_1")
			return err
		}, nil, 2, []time.Duration{time.Second}, 0},
		{"a lease without Idempotency-Key is never retried", []answer{unavailable, leased}, func(c *client.Client) error {
			_, err := c.Lease(context.Background(), client.LeaseRequest{Template: "shell"})
			return err
		}, nil, 1, nil, 503},
		{"a lease with Idempotency-Key is retried", []answer{badGateway, leased}, func(c *client.Client) error {
			_, err := c.Lease(context.Background(), client.LeaseRequest{Template: "shell", IdempotencyKey: "k-1"})
			return err
		}, nil, 2, []time.Duration{time.Second}, 0},
		{"creating a token is never retried", []answer{unavailable}, func(c *client.Client) error {
			_, err := c.CreateToken(context.Background(), "laptop")
			return err
		}, nil, 1, nil, 503},
		{"completing an artifact is never retried", []answer{unavailable}, func(c *client.Client) error {
			_, err := c.CompleteArtifact(context.Background(), "art_1", nil)
			return err
		}, nil, 1, nil, 503},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &script{answers: c.answers}
			cl, rec := newClient(t, s, c.opts...)
			err := c.call(cl)
			if got := client.StatusOf(err); got != c.status || (c.status == 0 && err != nil) {
				t.Fatalf("error %v (status %d), want status %d", err, got, c.status)
			}
			if len(s.requests) != c.attempts {
				t.Fatalf("%d requests, want %d", len(s.requests), c.attempts)
			}
			if !slices.Equal(rec.waits, c.waits) {
				t.Fatalf("waits %v, want %v", rec.waits, c.waits)
			}
			// Every attempt is the same request.
			for i, r := range s.requests {
				if r.Method != s.requests[0].Method || r.URL.String() != s.requests[0].URL.String() || s.bodies[i] != s.bodies[0] ||
					r.Header.Get("Idempotency-Key") != s.requests[0].Header.Get("Idempotency-Key") {
					t.Fatalf("attempt %d differs: %s %s %q", i+1, r.Method, r.URL, s.bodies[i])
				}
			}
		})
	}
}

func TestRetryStopsWhenTheContextEnds(t *testing.T) {
	s := &script{answers: []answer{{503, map[string]string{"Retry-After": "1"}, ""}}}
	cl, rec := newClient(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	rec.cancel = cancel
	_, err := cl.GetEnvironment(ctx, "env_1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if len(s.requests) != 1 {
		t.Fatalf("%d requests after the context ended, want 1", len(s.requests))
	}
}

func TestRequests(t *testing.T) {
	cases := []struct {
		name       string
		call       func(*client.Client) error
		method     string
		uri        string
		body       string
		idempotent string
	}{
		{"lease with key", func(c *client.Client) error {
			_, err := c.Lease(context.Background(), client.LeaseRequest{Template: "shell", Labels: map[string]string{"team": "web"}, Idle: "15m", IdempotencyKey: "k-1"})
			return err
		}, "POST", "/api/v1/environments", `{"template":"shell","labels":{"team":"web"},"idle":"15m"}`, "k-1"},
		{"list with state, limit and cursor", func(c *client.Client) error {
			_, err := c.ListEnvironments(context.Background(), client.EnvironmentQuery{State: "stopped", Limit: 10, Cursor: "abc=="})
			return err
		}, "GET", "/api/v1/environments?cursor=abc%3D%3D&limit=10&state=stopped", "", ""},
		{"an id is one path segment", func(c *client.Client) error {
			_, err := c.GetEnvironment(context.Background(), "a/../b")
			return err
		}, "GET", "/api/v1/environments/a%2F..%2Fb", "", ""},
		{"usage since a day", func(c *client.Client) error {
			_, err := c.Usage(context.Background(), time.Date(2026, 3, 1, 23, 0, 0, 0, time.UTC))
			return err
		}, "GET", "/api/v1/usage?since=2026-03-01", "", ""},
		{"usage default", func(c *client.Client) error {
			_, err := c.Usage(context.Background(), time.Time{})
			return err
		}, "GET", "/api/v1/usage", "", ""},
		{"link with expiry", func(c *client.Client) error {
			_, err := c.CreateLink(context.Background(), "art_1", "2h")
			return err
		}, "POST", "/api/v1/artifacts/art_1/links", `{"expires":"2h"}`, ""},
		{"link without body", func(c *client.Client) error {
			_, err := c.CreateLink(context.Background(), "art_1", "")
			return err
		}, "POST", "/api/v1/artifacts/art_1/links", "", ""},
		{"touch has no body", func(c *client.Client) error {
			_, err := c.TouchEnvironment(context.Background(), "env_1")
			return err
		}, "POST", "/api/v1/environments/env_1/touch", "", ""},
		{"token", func(c *client.Client) error {
			_, err := c.CreateToken(context.Background(), "laptop")
			return err
		}, "POST", "/api/v1/tokens", `{"name":"laptop","source":"cli"}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &script{answers: []answer{{200, nil, `{}`}}}
			srv := httptest.NewServer(s)
			defer srv.Close()
			// A base URL with a path (an API Gateway stage) and a trailing slash.
			cl, err := client.New(srv.URL+"/api/", "els_cli_test", client.WithUserAgent("envlease-test/1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.call(cl); err != nil {
				t.Fatal(err)
			}
			r := s.requests[0]
			if r.Method != c.method || r.URL.RequestURI() != c.uri || s.bodies[0] != c.body {
				t.Fatalf("sent %s %s %q\nwant %s %s %q", r.Method, r.URL.RequestURI(), s.bodies[0], c.method, c.uri, c.body)
			}
			if r.Header.Get("Authorization") != "Bearer els_cli_test" || r.Header.Get("User-Agent") != "envlease-test/1" ||
				r.Header.Get("Idempotency-Key") != c.idempotent {
				t.Fatalf("headers %v", r.Header)
			}
			if (c.body != "") != (r.Header.Get("Content-Type") == "application/json") {
				t.Fatalf("Content-Type %q with body %q", r.Header.Get("Content-Type"), c.body)
			}
		})
	}
}

func TestLeaseReportsAReplay(t *testing.T) {
	s := &script{answers: []answer{{201, map[string]string{"Idempotent-Replayed": "true"}, `{"environment":{"id":"env_1","state":"pending","idle":"30m"},"config":{"environment":"env_1"}}`}}}
	cl, _ := newClient(t, s)
	l, err := cl.Lease(context.Background(), client.LeaseRequest{Template: "shell", IdempotencyKey: "k"})
	if err != nil || !l.Replayed || l.Environment.ID != "env_1" || l.Environment.Idle.Std() != 30*time.Minute || l.Config.Environment != "env_1" {
		t.Fatalf("%+v %v", l, err)
	}
}

func TestBaseURL(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "http://h/?q=1", "http://h/#f"} {
		if _, err := client.New(bad, "t"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	c, err := client.New(" https://api.example.com/prod/ ", "t")
	if err != nil || c.BaseURL() != "https://api.example.com/prod" {
		t.Fatalf("%v %v", c, err)
	}
	if !strings.HasPrefix(client.RequestIDHeader, "X-") {
		t.Fatal(client.RequestIDHeader)
	}
}
