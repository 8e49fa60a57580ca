package preview_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/preview"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// movedNode is a node whose environment env is not ready here until ready
// is set; reroute answers what the control plane would.
type movedNode struct {
	*node
	ready   atomic.Bool
	calls   atomic.Int64
	reroute func(c ticket.Claims, tok string) (string, error)
}

func newMovedNode(t *testing.T, wakeWait time.Duration) *movedNode {
	a := app(t)
	m := &movedNode{node: &node{target: a.Listener.Addr().String()}}
	m.h = preview.NewHandler(preview.Config{
		Identity: func() (preview.Identity, bool) { return preview.Identity{Org: "acme", Node: "node_1", Key: key}, true },
		Targets: func(e string) ([]string, bool) {
			if e == env && m.ready.Load() {
				return []string{m.target}, true
			}
			return nil, false
		},
		Dial: func(ctx context.Context, e, target string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", target)
		},
		Revoked: func(e, p string) bool { return false },
		Reroute: func(ctx context.Context, c ticket.Claims, tok string) (string, error) {
			m.calls.Add(1)
			return m.reroute(c, tok)
		},
		WakeWait: wakeWait,
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	s := httptest.NewServer(m.h)
	t.Cleanup(s.Close)
	m.url = s.URL
	_, m.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return m
}

func noRedirects(c *http.Client) *http.Client {
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// A link whose environment is not ready on its node (it paused, or woke on
// another node) is sent where the control plane says it runs now, with the
// request's path and query, by its link and by its cookie; what the control
// plane says of a waking, unplaceable or ended environment is a page; a
// token the node did not sign asks nothing.
func TestMovedLinksFollowTheirEnvironment(t *testing.T) {
	const elsewhere = "http://web-19cec2a0e00p4k7a1m9b3c5.localhost:9999/?" + preview.Param + "=OTHER"
	cases := []struct {
		name     string
		answer   error
		code     int
		id       string
		retry    string
		location string
	}{
		{name: "moved", code: http.StatusFound, location: "http://web-19cec2a0e00p4k7a1m9b3c5.localhost:9999/a/b?x=1&" + preview.Param + "=OTHER"},
		{name: "waking", answer: preview.ErrWaking, code: http.StatusServiceUnavailable, id: "envlease-preview-waking", retry: "2"},
		{name: "no node", answer: preview.ErrNoNode, code: http.StatusServiceUnavailable, id: "envlease-preview-no-node", retry: "10"},
		{name: "gone", answer: preview.ErrGone, code: http.StatusForbidden, id: "envlease-preview-refused"},
		{name: "unreachable", answer: errors.New("connection refused"), code: http.StatusServiceUnavailable, id: "envlease-preview-unknown", retry: "5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMovedNode(t, 100*time.Millisecond)
			m.reroute = func(c ticket.Claims, tok string) (string, error) {
				if c.Preview != "pv_1" || c.Env != env || tok == "" {
					t.Errorf("asked about %+v", c)
				}
				if tc.answer != nil {
					return "", tc.answer
				}
				return elsewhere, nil
			}
			tok := m.token(t, "web", time.Now().Add(time.Hour), nil)
			check := func(how string, res *http.Response) {
				t.Helper()
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.code || res.Header.Get("Location") != tc.location ||
					!strings.Contains(string(body), tc.id) || res.Header.Get("Retry-After") != tc.retry || res.Header.Get("Refresh") != tc.retry {
					t.Errorf("%s: %d to %q, Retry-After %q Refresh %q: %s", how, res.StatusCode, res.Header.Get("Location"),
						res.Header.Get("Retry-After"), res.Header.Get("Refresh"), body)
				}
			}
			c := noRedirects(m.client(t))
			res, err := c.Get(m.link("web", "/a/b?x=1", tok))
			if err != nil {
				t.Fatal(err)
			}
			check("by the link", res)
			req, _ := http.NewRequest("GET", m.link("web", "/a/b?x=1", ""), nil)
			req.AddCookie(&http.Cookie{Name: preview.Cookie, Value: tok})
			if res, err = c.Do(req); err != nil {
				t.Fatal(err)
			}
			check("by the cookie", res)
		})
	}

	// Tokens this node did not sign, or for another host, ask nothing.
	m := newMovedNode(t, 100*time.Millisecond)
	m.reroute = func(ticket.Claims, string) (string, error) { return elsewhere, nil }
	other, _ := ticket.Sign([]byte(strings.Repeat("x", ticket.KeySize)), ticket.Claims{Org: "acme", Env: env, Node: "node_1",
		Targets: []string{m.target}, Exp: time.Now().Add(time.Hour).Unix(), Open: ticket.OpenPreview, Preview: "pv_1", Host: m.host("web")})
	for _, tok := range []string{
		other,
		m.token(t, "web", time.Now().Add(time.Hour), func(c *ticket.Claims) { c.Node = "node_2" }),
		m.token(t, "web", time.Now().Add(time.Hour), func(c *ticket.Claims) { c.Host = m.host("api") }),
		m.token(t, "web", time.Now().Add(-time.Hour), nil),
	} {
		if code, body := get(t, noRedirects(m.client(t)), m.link("web", "/", tok)); code != http.StatusForbidden || !strings.Contains(body, "envlease-preview-refused") {
			t.Errorf("a token not this node's: %d %s", code, body)
		}
	}
	if n := m.calls.Load(); n != 0 {
		t.Errorf("%d asks for tokens the node did not sign", n)
	}
}

// An environment that wakes: the request waits while the control plane
// says waking; when it answers a link to this very node, the request waits
// until the environment serves here, then follows the link and reaches the
// app. Requests arriving together ask once.
func TestWakingLinkWaitsAndOpensHere(t *testing.T) {
	m := newMovedNode(t, time.Minute)
	var (
		mu    sync.Mutex
		asked int
	)
	m.reroute = func(c ticket.Claims, tok string) (string, error) {
		mu.Lock()
		asked++
		n := asked
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		if n == 1 {
			return "", preview.ErrWaking
		}
		// The control plane says ready an instant before this node does.
		go func() { time.Sleep(300 * time.Millisecond); m.ready.Store(true) }()
		return "http://" + m.host("web") + ":" + m.port + "/?" + preview.Param + "=" + m.token(t, "web", time.Now().Add(time.Hour), nil), nil
	}
	tok := m.token(t, "web", time.Now().Add(time.Hour), nil)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := get(t, m.client(t), m.link("web", "/page/x?y=2", tok))
			if code != http.StatusOK || !strings.Contains(body, "path=/page/x query=y=2") {
				t.Errorf("after the wake: %d %s", code, body)
			}
		}()
	}
	wg.Wait()
	if n := m.calls.Load(); n != 2 {
		t.Errorf("%d asks, want 2 (waking, then the link): requests that arrive together share one", n)
	}
}

// A link the control plane said opens nothing any more (revoked, expired,
// its environment ended: none of which comes back) is refused by the node
// itself from then on: a page left open that polls it (a hot-reload client)
// costs the control plane one ask, not one a request.
func TestGoneLinkAsksOnce(t *testing.T) {
	m := newMovedNode(t, 100*time.Millisecond)
	m.reroute = func(ticket.Claims, string) (string, error) { return "", preview.ErrGone }
	tok := m.token(t, "web", time.Now().Add(time.Hour), nil)
	c := noRedirects(m.client(t))
	for i := 0; i < 3; i++ {
		if code, body := get(t, c, m.link("web", "/", tok)); code != http.StatusForbidden || !strings.Contains(body, "envlease-preview-refused") {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		req, _ := http.NewRequest("GET", m.link("web", "/", ""), nil)
		req.AddCookie(&http.Cookie{Name: preview.Cookie, Value: tok})
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("request %d by the cookie: %d", i, res.StatusCode)
		}
	}
	if n := m.calls.Load(); n != 1 {
		t.Errorf("%d asks about a link that opens nothing, want 1", n)
	}
	// Another preview of the same environment is asked about as before.
	other := m.token(t, "web", time.Now().Add(time.Hour), func(c *ticket.Claims) { c.Preview = "pv_2" })
	get(t, c, m.link("web", "/", other))
	if n := m.calls.Load(); n != 2 {
		t.Errorf("%d asks after another preview's link, want 2", n)
	}
}
