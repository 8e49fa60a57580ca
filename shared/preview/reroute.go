package preview

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// A link goes to the node that ran its environment when it was made. When
// the environment paused since, or woke on another node, or its export got
// a new target, that node still holds a token it signed itself, so it asks
// the control plane where the environment runs now (Config.Reroute), which
// wakes a paused one, and sends the browser there with a link for that node
// (docs/previews.md, "A link outlives a pause"). Only a token this node
// signed, valid for the request's host, is asked about, so a request without
// a real link costs the control plane nothing.

// Errors of Config.Reroute.
var (
	// ErrWaking: the environment is waking (or starting); ask again.
	ErrWaking = errors.New("preview: the environment is waking")
	// ErrNoNode: no active node of its pool can run it now.
	ErrNoNode = errors.New("preview: no node can run the environment now")
	// ErrGone: the link opens nothing any more (revoked, expired, or its
	// environment ended).
	ErrGone = errors.New("preview: the link opens nothing any more")
)

// DefaultWakeWait is how long one request waits for a waking environment:
// a restore of a small checkpoint takes seconds, and a browser waits that
// long for a page. Past it the waking page asks the browser to come back.
const DefaultWakeWait = 30 * time.Second

// Spacing of the asks of one waking environment (the control plane itself
// waits several seconds within each), and of the looks at this node while
// an environment that woke here starts serving.
const (
	rerouteRetry = 2 * time.Second
	// rerouteCall bounds one ask, which the control plane answers within
	// its own wait (8 s).
	rerouteCall = 15 * time.Second
	localPoll   = 100 * time.Millisecond
)

// reroute answers a request whose token (tok, c) this node signed but whose
// environment is not ready here: a redirect to the link where it runs now,
// or a page that says it is waking, has no node, or is gone.
func (h *Handler) reroute(w http.ResponseWriter, r *http.Request, tok string, c ticket.Claims) {
	if h.gone.has(c.Preview, h.cfg.Now()) {
		h.cfg.Log.Info("preview refused", "host", r.Host, "remote", r.RemoteAddr, "reason", "the control plane said the link opens nothing")
		refuse(w)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.WakeWait)
	defer cancel()
	for {
		// One ask serves every request that waits on it, so it is not
		// cancelled with the request that made it.
		link, err := h.routes.do(ctx, c.Preview, func() (string, error) {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rerouteCall)
			defer cancel()
			return h.cfg.Reroute(actx, c, tok)
		})
		if err == nil {
			err = h.moveTo(ctx, w, r, link)
			if err == nil {
				return
			}
		}
		switch {
		case errors.Is(err, ErrGone):
			h.gone.add(c.Preview, c.Expires(), h.cfg.Now())
			h.cfg.Log.Info("preview refused", "host", r.Host, "remote", r.RemoteAddr, "reason", "the control plane says the link opens nothing")
			refuse(w)
			return
		case errors.Is(err, ErrNoNode):
			retryPage(w, "envlease-preview-no-node", 10, "No node can run this environment now",
				"The environment was paused. It wakes when a node of its pool can run it; this page asks again by itself.")
			return
		case !errors.Is(err, ErrWaking):
			h.cfg.Log.Warn("preview: where the environment runs now is unknown", "host", r.Host, "preview", c.Preview, "err", err)
			retryPage(w, "envlease-preview-unknown", 5, "The environment cannot be reached now",
				"Where this environment runs could not be asked just now; this page asks again by itself.")
			return
		}
		select {
		case <-ctx.Done():
			if r.Context().Err() == nil {
				retryPage(w, "envlease-preview-waking", 2, "The environment is waking",
					"It was paused: its files come back from its checkpoint and its command starts again. This page opens it by itself once it is ready.")
			}
			return
		case <-time.After(rerouteRetry):
		}
	}
}

// moveTo sends the browser to link, the preview's link on the node that
// runs its environment now, keeping the request's path and query. A link
// to this very node waits until the environment serves here (it may have
// reported ready an instant before the node's own record says so), so a
// browser is never sent round in a loop.
func (h *Handler) moveTo(ctx context.Context, w http.ResponseWriter, r *http.Request, link string) error {
	u, err := url.Parse(link)
	if err != nil || u.Host == "" {
		return errors.New("the control plane answered no link")
	}
	tok := u.Query().Get(Param)
	if id, ok := h.cfg.Identity(); ok {
		if c, err := ticket.Verify(id.Key, tok, h.cfg.Now()); err == nil && c.Node == id.Node {
			for {
				_, _, err := h.check(tok, u.Host, c.Env)
				if err == nil {
					break
				}
				if !errors.Is(err, errNotHere) {
					return ErrGone
				}
				select {
				case <-ctx.Done():
					return ErrWaking
				case <-time.After(localPoll):
				}
			}
		}
	}
	to := url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/" + strings.TrimLeft(r.URL.Path, "/\\")}
	if r.URL.RawPath != "" {
		to.RawPath = "/" + strings.TrimLeft(r.URL.RawPath, "/\\") // escapes such as %2F as they came
	}
	to.RawQuery = withoutToken(r.URL.RawQuery)
	if to.RawQuery != "" {
		to.RawQuery += "&"
	}
	to.RawQuery += Param + "=" + tok
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	code := http.StatusFound
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		code = http.StatusTemporaryRedirect
	}
	http.Redirect(w, r, to.String(), code)
	return nil
}

// retryPage is a 503 page that the browser reloads by itself after secs.
func retryPage(w http.ResponseWriter, id string, secs int, title, text string) {
	v := strconv.Itoa(secs)
	w.Header().Set("Retry-After", v)
	w.Header().Set("Refresh", v)
	page(w, id, http.StatusServiceUnavailable, title, text)
}

// inflight makes the concurrent asks about one preview one ask: a page and
// its assets, or a hot-reload client retrying, arrive together.
type inflight struct {
	mu    sync.Mutex
	calls map[string]*call
}

type call struct {
	done chan struct{}
	link string
	err  error
}

func (f *inflight) do(ctx context.Context, key string, fn func() (string, error)) (string, error) {
	f.mu.Lock()
	if c, ok := f.calls[key]; ok {
		f.mu.Unlock()
		select {
		case <-c.done:
			return c.link, c.err
		case <-ctx.Done():
			return "", ErrWaking // the request's wait is over
		}
	}
	c := &call{done: make(chan struct{})}
	f.calls[key] = c
	f.mu.Unlock()
	c.link, c.err = fn()
	f.mu.Lock()
	delete(f.calls, key)
	f.mu.Unlock()
	close(c.done)
	return c.link, c.err
}

// maxGone bounds the previews a node remembers as opening nothing, and
// goneFor how long at most: what the node hears as gone includes refusals
// of its own credential, which may be put right.
const (
	maxGone = 4096
	goneFor = 5 * time.Minute
)

// goneSet is the previews the control plane said open nothing any more
// (revoked, expired, their environment ended or deleted: none comes back),
// each until its token expires (after which the token alone is refused)
// or goneFor has passed: a page that keeps asking (a hot-reload client
// polling a deleted environment's link) costs the control plane one ask
// every few minutes, not one a request.
type goneSet struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (g *goneSet) has(preview string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.m[preview]
	return ok && now.Before(until)
}

func (g *goneSet) add(preview string, until, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]time.Time{}
	}
	if len(g.m) >= maxGone {
		for p, u := range g.m {
			if !now.Before(u) {
				delete(g.m, p)
			}
		}
		if len(g.m) >= maxGone {
			return // asked again, as without the set
		}
	}
	if limit := now.Add(goneFor); until.After(limit) {
		until = limit
	}
	g.m[preview] = until
}
