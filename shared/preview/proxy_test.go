package preview_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/envlease/envlease/shared/preview"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

const (
	env  = "env_19cec2a0e00p4k7a1m9b3c5"
	env2 = "env_19cec2a0e00p4k7a1m9b3c6"
)

var key = bytes.Repeat([]byte{7}, ticket.KeySize)

// app is what runs in the environment: it says what it received, echoes
// WebSockets, streams events, redirects and counts a large upload.
func app(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			_ = c.Write(r.Context(), typ, b)
		}
	})
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // an open stream: the first event must arrive anyway
	})
	// A page that opens a WebSocket back to where it came from and shows
	// the echo, as a dev server's hot reload does.
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>app</title><p id="app">served by the app</p><p id="ws">waiting</p>
<script>
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/echo");
ws.onopen = () => ws.send("hello");
ws.onmessage = (m) => { document.getElementById("ws").textContent = "echo: " + m.data; };
ws.onerror = () => { document.getElementById("ws").textContent = "error"; };
</script>`)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/where", http.StatusFound) })
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s path=%s query=%s cookie=%s xfh=%s", r.Host, r.URL.Path, r.URL.RawQuery, r.Header.Get("Cookie"), r.Header.Get("X-Forwarded-Host"))
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

type node struct {
	h        *preview.Handler
	target   string
	target2  string
	revoked  atomic.Bool
	activity atomic.Int64
	opened   atomic.Int64
	from     atomic.Value // the Remote of the last opening
	url      string
	port     string
}

func newNode(t *testing.T) *node {
	a, a2 := app(t), app(t)
	n := &node{target: a.Listener.Addr().String(), target2: a2.Listener.Addr().String()}
	n.h = preview.NewHandler(preview.Config{
		Identity: func() (preview.Identity, bool) { return preview.Identity{Org: "acme", Node: "node_1", Key: key}, true },
		Targets: func(e string) ([]string, bool) {
			switch e {
			case env:
				return []string{n.target}, true
			case env2:
				return []string{n.target2}, true
			}
			return nil, false
		},
		Dial: func(ctx context.Context, e, target string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", target)
		},
		Revoked:  func(e, p string) bool { return n.revoked.Load() && p == "pv_1" },
		Activity: func(string) { n.activity.Add(1) },
		Opened:   func(o preview.Opened) { n.opened.Add(1); n.from.Store(o.Remote) },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Public: func(e, x string) (string, bool) {
			return n.target, e == env && x == "open"
		},
	})
	s := httptest.NewServer(n.h)
	t.Cleanup(s.Close)
	n.url = s.URL
	_, n.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return n
}

func (n *node) host(export string) string { return n.hostOf(export, env) }

func (n *node) hostOf(export, e string) string {
	l, err := preview.Label(export, e)
	if err != nil {
		panic(err)
	}
	return l + ".localhost"
}

func (n *node) token(t *testing.T, export string, exp time.Time, mod func(*ticket.Claims)) string {
	c := ticket.Claims{Org: "acme", Env: env, Node: "node_1", Targets: []string{n.target}, Exp: exp.Unix(),
		Open: ticket.OpenPreview, Preview: "pv_1", Host: n.host(export)}
	if mod != nil {
		mod(&c)
	}
	tk, err := ticket.Sign(key, c)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// client reaches the node for any *.localhost host, as a browser does.
func (n *node) client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	addr := strings.TrimPrefix(n.url, "http://")
	return &http.Client{Jar: jar, Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}}
}

func (n *node) link(export, path, tok string) string {
	u := "http://" + n.host(export) + ":" + n.port + path
	if tok == "" {
		return u
	}
	if strings.Contains(path, "?") {
		return u + "&" + preview.Param + "=" + tok
	}
	return u + "?" + preview.Param + "=" + tok
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A link's token becomes a host-only cookie and leaves the address; the app
// sees its own query and cookies, never the proxy's.
func TestLinkTradesTokenForCookie(t *testing.T) {
	n := newNode(t)
	tok := n.token(t, "web", time.Now().Add(time.Hour), nil)
	c := n.client(t)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.Get(n.link("web", "/a/b?x=1", tok))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/a/b?x=1" {
		t.Fatalf("first use: %d to %q, want 302 to /a/b?x=1", res.StatusCode, res.Header.Get("Location"))
	}
	sc := res.Header.Get("Set-Cookie")
	for _, want := range []string{preview.Cookie + "=", "Path=/", "HttpOnly", "SameSite=Lax"} {
		if !strings.Contains(sc, want) {
			t.Errorf("Set-Cookie %q lacks %q", sc, want)
		}
	}
	if strings.Contains(strings.ToLower(sc), "domain=") {
		t.Errorf("Set-Cookie %q names a domain: the cookie must be host-only", sc)
	}
	// The redirect never leaves the host, whatever the path.
	for _, p := range []string{"//evil.example/x", "/%2F%2Fevil.example", "/\\evil.example"} {
		res, err := c.Get(n.link("web", p, tok))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if loc := res.Header.Get("Location"); !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") {
			t.Errorf("path %q redirects to %q", p, loc)
		}
	}
	c.CheckRedirect = nil
	u, _ := url.Parse(n.link("web", "/", ""))
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "app", Value: "kept"}})
	code, body := get(t, c, n.link("web", "/a/b?x=1", ""))
	if code != 200 || !strings.Contains(body, "path=/a/b query=x=1 cookie=app=kept") || strings.Contains(body, preview.Cookie) {
		t.Fatalf("through the cookie: %d %q", code, body)
	}
	if !strings.Contains(body, "host="+n.host("web")) || !strings.Contains(body, "xfh="+n.host("web")) {
		t.Errorf("the app should see the preview's host: %q", body)
	}
	if n.opened.Load() < 1 || n.activity.Load() < 1 {
		t.Errorf("opened %d, activity %d", n.opened.Load(), n.activity.Load())
	}
}

// Whatever is not a valid token for this host and a live preview gets the
// refusal page, never the app.
func TestRefusals(t *testing.T) {
	n := newNode(t)
	hour := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name   string
		export string
		tok    func() string
		revoke bool
	}{
		{"no token", "web", func() string { return "" }, false},
		{"expired", "web", func() string { return n.token(t, "web", time.Now().Add(-time.Hour), nil) }, false},
		{"tampered", "web", func() string { return n.token(t, "web", hour, nil) + "x" }, false},
		{"revoked", "web", func() string { return n.token(t, "web", hour, nil) }, true},
		{"another host's", "api", func() string { return n.token(t, "web", hour, nil) }, false},
		{"another organization's", "web", func() string {
			return n.token(t, "web", hour, func(c *ticket.Claims) { c.Org = "other" })
		}, false},
		{"a tunnel ticket", "web", func() string { return n.token(t, "web", hour, func(c *ticket.Claims) { c.Open = "" }) }, false},
		{"a target not the environment's", "web", func() string {
			return n.token(t, "web", hour, func(c *ticket.Claims) { c.Targets = []string{"127.0.0.1:1"} })
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.revoked.Store(tc.revoke)
			code, body := get(t, n.client(t), n.link(tc.export, "/", tc.tok()))
			if code != http.StatusForbidden || !strings.Contains(body, "envlease-preview-refused") || strings.Contains(body, "host=") {
				t.Fatalf("%d %q, want the refusal page", code, body)
			}
		})
	}
	// A cookie stops opening anything once the node hears of the revocation.
	n.revoked.Store(false)
	c := n.client(t)
	if code, _ := get(t, c, n.link("web", "/", n.token(t, "web", hour, nil))); code != 200 {
		t.Fatalf("valid link: %d", code)
	}
	n.revoked.Store(true)
	if code, _ := get(t, c, n.link("web", "/", "")); code != http.StatusForbidden {
		t.Fatalf("revoked cookie: %d, want 403", code)
	}
}

// WebSockets, server-sent events, large uploads and redirects pass through;
// a public export needs no token.
func TestTheWebAsItIs(t *testing.T) {
	n := newNode(t)
	c := n.client(t)
	if code, _ := get(t, c, n.link("web", "/", n.token(t, "web", time.Now().Add(time.Hour), nil))); code != 200 {
		t.Fatalf("open: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ws, _, err := websocket.Dial(ctx, strings.Replace(n.link("web", "/echo", ""), "http", "ws", 1), &websocket.DialOptions{HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "hello" {
		t.Fatalf("echo %q, %v", b, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.link("web", "/events", ""), nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("data: one\n"))
	if _, err := io.ReadFull(res.Body, line); err != nil || string(line) != "data: one\n" {
		t.Fatalf("event %q, %v", line, err)
	}
	res.Body.Close()

	const size = 64 << 20
	res, err = c.Post(n.link("web", "/upload", ""), "application/octet-stream", io.LimitReader(zeros{}, size))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != fmt.Sprint(size) {
		t.Fatalf("upload: the app read %s bytes, want %d", b, size)
	}

	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err = c.Get(n.link("web", "/moved", ""))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/where" {
		t.Fatalf("redirect: %d %q", res.StatusCode, res.Header.Get("Location"))
	}

	if code, body := get(t, n.client(t), n.link("open", "/", "")); code != 200 || !strings.Contains(body, "path=/") {
		t.Fatalf("public export: %d %q", code, body)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestHostNames(t *testing.T) {
	for _, tc := range []struct {
		host, export, env string
		ok                bool
	}{
		{"web-19cec2a0e00p4k7a1m9b3c5.localhost:8080", "web", env, true},
		{"My-App-19cec2a0e00p4k7a1m9b3c5.node-1.example.com", "my-app", env, true},
		{"node-1.example.com", "", "", false},
		{"127.0.0.1:7443", "", "", false},
		{"-19cec2a0e00p4k7a1m9b3c5.localhost", "", "", false},
		{"web-19cec2a0e00p4k7a1m9b3cw.localhost", "", "", false},
	} {
		x, e, ok := preview.ParseHost(tc.host)
		if x != tc.export || e != tc.env || ok != tc.ok {
			t.Errorf("ParseHost(%q) = %q, %q, %v; want %q, %q, %v", tc.host, x, e, ok, tc.export, tc.env, tc.ok)
		}
	}
	if _, err := preview.Label("Web", env); err == nil {
		t.Error("an export with capitals has no label")
	}
}

// An opening's address is the connection's peer: a client's own
// X-Forwarded-For is not believed.
func TestOpenedFromIsThePeer(t *testing.T) {
	n := newNode(t)
	req, err := http.NewRequest(http.MethodGet, n.link("web", "/", n.token(t, "web", time.Now().Add(time.Hour), nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", "203.0.113.9, 198.51.100.1")
	c := n.client(t)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || n.opened.Load() != 1 {
		t.Fatalf("opening: %d, %d openings", res.StatusCode, n.opened.Load())
	}
	if from, _ := n.from.Load().(string); from != "127.0.0.1" {
		t.Fatalf("opened from %q, want the peer 127.0.0.1", from)
	}
}

// Cookies of the proxy's name that do not open this host (another app's
// domain-wide cookie, or one planted to lock it) block neither a public
// export nor a valid cookie or link; past a bound they are ignored, not
// refused.
func TestStrayCookiesBlockNothing(t *testing.T) {
	n := newNode(t)
	hour := time.Now().Add(time.Hour)
	valid := n.token(t, "web", hour, nil)
	other := n.token(t, "api", hour, nil) // valid, for another host
	stray := func(k int) []string {
		out := make([]string, k)
		for i := range out {
			out[i] = other
			if i%2 == 1 {
				out[i] = "garbage"
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		export  string
		token   string // in the query
		cookies []string
		want    int
	}{
		{"public export, a stray cookie", "open", "", stray(1), http.StatusOK},
		{"public export, many stray cookies", "open", "", stray(40), http.StatusOK},
		{"a valid cookie after stray ones", "web", "", append(stray(3), valid), http.StatusOK},
		{"a valid link with stray cookies", "web", valid, stray(3), http.StatusFound},
		{"only stray cookies, not public", "web", "", stray(40), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, n.link(tc.export, "/", tc.token), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.cookies {
				req.AddCookie(&http.Cookie{Name: preview.Cookie, Value: v})
			}
			c := &http.Client{Transport: n.client(t).Transport,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("%d %q, want %d", res.StatusCode, b, tc.want)
			}
			if tc.want == http.StatusOK && strings.Contains(string(b), preview.Cookie) {
				t.Fatalf("the app saw the proxy's cookie: %q", b)
			}
		})
	}
}
