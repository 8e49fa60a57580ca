package preview

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// Identity is what the node checks tokens against: its organization, its
// node id and its tunnel key, as the last registration gave them.
type Identity struct {
	Org, Node string
	Key       []byte
}

// Opened says a link's token was traded for a cookie: who (the preview and
// its environment) and from where (the browser's address and agent).
type Opened struct {
	Claims    ticket.Claims
	Remote    string
	UserAgent string
}

// Config is what the proxy needs of the node. Every function but Public,
// Activity and Opened is required.
type Config struct {
	Identity func() (Identity, bool)
	// Targets are the export targets of an environment the node runs and
	// that is ready; ok is false for any other.
	Targets func(env string) ([]string, bool)
	// Dial connects to an export target of an environment.
	Dial func(ctx context.Context, env, target string) (net.Conn, error)
	// Revoked says whether the node has heard the preview is revoked.
	Revoked func(env, preview string) bool
	// Public is the target of an export its template makes public (no
	// token needed); ok is false for every other export.
	Public func(env, export string) (target string, ok bool)
	// Activity is called for every request proxied to an environment, so
	// that it does not go idle while someone looks at it.
	Activity func(env string)
	// Opened is called when a link's token is traded for a cookie.
	Opened func(Opened)
	// Reroute asks the control plane where a link's environment runs now,
	// for a token this node signed whose environment is not ready here
	// (paused, woken on another node, or its export moved): it wakes a
	// paused environment and answers the link's URL on the node that runs
	// it, or ErrWaking, ErrNoNode or ErrGone (reroute.go). Nil: such a
	// token is refused, as before.
	Reroute func(ctx context.Context, c ticket.Claims, token string) (string, error)
	// WakeWait bounds how long one request waits for a waking
	// environment before it is answered the waking page (DefaultWakeWait).
	WakeWait time.Duration
	Log      *slog.Logger
	Now      func() time.Time
}

// Handler is the node's preview proxy: mount it for requests whose Host
// ParseHost accepts.
type Handler struct {
	cfg   Config
	proxy *httputil.ReverseProxy
	// routes are the reroutes under way, one per preview (reroute.go).
	routes inflight
	// gone are the previews the control plane said open nothing
	// (reroute.go).
	gone goneSet
}

type routeKey struct{}

// route is where one request goes, handed from ServeHTTP to the proxy.
type route struct{ env, target string }

// NewHandler returns the proxy.
func NewHandler(cfg Config) *Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.WakeWait <= 0 {
		cfg.WakeWait = DefaultWakeWait
	}
	h := &Handler{cfg: cfg, routes: inflight{calls: map[string]*call{}}}
	tr := &http.Transport{
		// The address the transport asks for is only its pool's key
		// (Rewrite makes it per environment and target); the route in the
		// request's context says what to dial, inside the environment.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			rt, ok := ctx.Value(routeKey{}).(route)
			if !ok {
				return nil, errors.New("preview: no route")
			}
			return cfg.Dial(ctx, rt.env, rt.target)
		},
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // a long poll or a slow build is the app's business
		DisableCompression:    true,
	}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rt := pr.In.Context().Value(routeKey{}).(route)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = poolHost(rt)
			// The app sees the host the browser asked for, as it would
			// behind any reverse proxy, so the absolute links it makes
			// and the host checks dev servers make hold.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			stripCookie(pr.Out.Header)
		},
		Transport: tr,
		// Server-sent events and chunked bodies are passed on as they come
		// (the proxy flushes them at once), everything else every 100 ms.
		FlushInterval: 100 * time.Millisecond,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			cfg.Log.Info("preview: the export did not answer", "host", r.Host, "err", err)
			page(w, "envlease-preview-no-answer", http.StatusBadGateway, "The environment did not answer",
				"The preview link is valid, but the service it opens did not answer. It may still be starting, or it stopped listening.")
		},
		ErrorLog: nil,
	}
	return h
}

func poolHost(rt route) string {
	_, port, err := net.SplitHostPort(rt.target)
	if err != nil {
		port = "80"
	}
	return strings.TrimPrefix(rt.env, envPrefix) + ".env:" + port
}

// errNotHere is a token this node signed, valid for the host, whose
// environment is not ready here or whose export moved: the environment
// paused, woke elsewhere, or is starting again. The control plane says
// where it went (Reroute).
var errNotHere = errors.New("the environment is not ready here, or its export moved")

// maxCookies bounds the cookies of the proxy's name a request has checked:
// each costs a signature check, and a page can plant many. Those past it
// are ignored, not refused.
const maxCookies = 8

// ServeHTTP checks the request's token (in the query, first) or cookie and
// proxies it, or answers the refusal page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	export, env, ok := ParseHost(r.Host)
	if !ok {
		refuse(w)
		return
	}
	if tok, inQuery := queryToken(r); inQuery {
		c, _, err := h.check(tok, r.Host, env)
		if errors.Is(err, errNotHere) && h.cfg.Reroute != nil {
			h.reroute(w, r, tok, c)
			return
		}
		if err != nil {
			h.cfg.Log.Info("preview refused", "host", r.Host, "remote", r.RemoteAddr, "reason", err.Error())
			refuse(w)
			return
		}
		h.trade(w, r, tok, c)
		return
	}
	// Another host under the same domain may have set a cookie of the
	// same name for the whole domain (an app in another environment, or
	// one planted to lock this host): any one that is valid for this host
	// opens it, and when none is the request is one without a token, which
	// a public export still serves.
	var (
		reason error
		// moved is a cookie this node signed whose environment is not
		// ready here: it is rerouted when no other cookie opens the host.
		moved      string
		movedClaim ticket.Claims
	)
	seen := 0
	for _, ck := range r.Cookies() {
		if ck.Name != Cookie || ck.Value == "" {
			continue
		}
		if seen++; seen > maxCookies {
			break
		}
		c, target, err := h.check(ck.Value, r.Host, env)
		if err == nil {
			h.serve(w, r, route{env: env, target: target})
			return
		}
		if errors.Is(err, errNotHere) && moved == "" {
			moved, movedClaim = ck.Value, c
		}
		reason = err
	}
	if h.cfg.Public != nil {
		if target, ok := h.cfg.Public(env, export); ok {
			h.serve(w, r, route{env: env, target: target})
			return
		}
	}
	if moved != "" && h.cfg.Reroute != nil {
		h.reroute(w, r, moved, movedClaim)
		return
	}
	if reason != nil {
		h.cfg.Log.Info("preview refused", "host", r.Host, "remote", r.RemoteAddr, "reason", reason.Error())
	}
	refuse(w)
}

// check verifies a token for host and env and returns its claims and the
// target it opens.
func (h *Handler) check(tok, host, env string) (ticket.Claims, string, error) {
	id, ok := h.cfg.Identity()
	if !ok {
		return ticket.Claims{}, "", errors.New("the node has no tunnel key yet")
	}
	c, err := ticket.Verify(id.Key, tok, h.cfg.Now())
	if err != nil {
		return c, "", err
	}
	switch {
	case c.Open != ticket.OpenPreview:
		return c, "", errors.New("not a preview token")
	case c.Org != id.Org || c.Node != id.Node:
		return c, "", errors.New("a token for another node")
	case c.Env != env || c.Host != HostName(host) || c.Preview == "" || len(c.Targets) != 1:
		return c, "", errors.New("a token for another host")
	}
	targets, ok := h.cfg.Targets(env)
	if ok && h.cfg.Revoked(env, c.Preview) {
		return c, "", errors.New("the preview is revoked")
	}
	if !ok || !slices.Contains(targets, c.Targets[0]) {
		return c, "", errNotHere
	}
	return c, c.Targets[0], nil
}

// trade sets the cookie for this host alone and sends the browser to the
// same address without the token, so the token leaves the address bar,
// the history and the Referer the app's pages would send.
func (h *Handler) trade(w http.ResponseWriter, r *http.Request, tok string, c ticket.Claims) {
	http.SetCookie(w, &http.Cookie{
		Name: Cookie, Value: tok, Path: "/", Expires: c.Expires(),
		MaxAge:   int(time.Until(c.Expires()).Seconds()) + 1,
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	})
	if h.cfg.Opened != nil {
		h.cfg.Opened(Opened{Claims: c, Remote: remote(r), UserAgent: r.UserAgent()})
	}
	// A path that begins with two slashes (or a slash and a backslash)
	// would read as another host's address: the redirect stays on this
	// host whatever the path.
	to := "/" + strings.TrimLeft(r.URL.EscapedPath(), "/\\")
	if q := withoutToken(r.URL.RawQuery); q != "" {
		to += "?" + q
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	code := http.StatusFound
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		code = http.StatusTemporaryRedirect
	}
	http.Redirect(w, r, to, code)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, rt route) {
	if h.cfg.Activity != nil {
		h.cfg.Activity(rt.env)
	}
	h.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, rt)))
}

// remote is the browser's address: the connection's peer. X-Forwarded-For
// is the client's to write, so it is not believed: the node has no setting
// that says a proxy it trusts stands in front of it.
func remote(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

func queryToken(r *http.Request) (string, bool) {
	for _, kv := range strings.Split(r.URL.RawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k == Param {
			return v, true
		}
	}
	return "", false
}

// withoutToken is raw without the token's parameter, the others as they were.
func withoutToken(raw string) string {
	var keep []string
	for _, kv := range strings.Split(raw, "&") {
		if k, _, _ := strings.Cut(kv, "="); kv != "" && k != Param {
			keep = append(keep, kv)
		}
	}
	return strings.Join(keep, "&")
}

// stripCookie removes the proxy's own cookie from the Cookie headers, the
// others as they were; a header left empty goes.
func stripCookie(h http.Header) {
	vals := h.Values("Cookie")
	if len(vals) == 0 {
		return
	}
	var out []string
	for _, v := range vals {
		var keep []string
		for _, part := range strings.Split(v, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if name != Cookie && strings.TrimSpace(part) != "" {
				keep = append(keep, strings.TrimSpace(part))
			}
		}
		if len(keep) > 0 {
			out = append(out, strings.Join(keep, "; "))
		}
	}
	h.Del("Cookie")
	for _, v := range out {
		h.Add("Cookie", v)
	}
}
