package agent_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/preview"
)

// A preview link from the API opens the environment's web export at the
// node's endpoint, by its *.localhost host name; its cookie opens nothing
// on another environment's preview; revoked, it opens nothing within a
// heartbeat.
func TestAgentServesPreviews(t *testing.T) {
	web := domain.Template{
		Name:    "web",
		Command: []string{"sh", "-c", `mktemp -u XXXXXXXX > index.html; exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
		Exports: map[string]domain.Export{"web": {Port: 0}},
	}
	// Over the node protocol the revocation is pushed, and activity and
	// openings ride its beats.
	t.Run("over HTTP", func(t *testing.T) { servesPreviews(t, newStack(t, web)) })
	t.Run("over the node protocol", func(t *testing.T) { servesPreviews(t, newSocketStack(t, web).stack) })
}

func servesPreviews(t *testing.T, s *stack) {
	s.Clock.Set(time.Now())
	// The agent measures activity on the stack's clock: a node reports an
	// environment active at most every quarter of its idle timeout, the
	// first a quarter after its start (docs/environments.md, "When an
	// environment is idle").
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.Now = s.Clock.Now })
	// A idles after 30 minutes of its hour, so a touch has room to move.
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "web", "idle": "30m"})
	if r.Status != http.StatusCreated {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var la0 environments.Leased
	r.JSON(t, &la0)
	a, b := la0.Environment.ID, s.lease(t, "web")
	leased := s.wait(t, a, domain.StateReady)
	s.wait(t, b, domain.StateReady)
	// Later, by the service's clock, and past a quarter of the idle
	// timeout: what the preview carries must move the idle deadline past
	// the one the lease set.
	s.Clock.Advance(8 * time.Minute)

	make := func(id string) environments.PreviewLink {
		t.Helper()
		r := s.Do("POST", "/v1/environments/"+id+"/previews", apitest.BobToken, map[string]any{"expires": "10m"})
		if r.Status != http.StatusCreated {
			t.Fatalf("preview: %d %s", r.Status, r.Body)
		}
		var l environments.PreviewLink
		r.JSON(t, &l)
		return l
	}
	la, lb := make(a), make(b)
	u, err := url.Parse(la.URL)
	if err != nil || !strings.HasSuffix(u.Hostname(), ".localhost") || u.Query().Get(preview.Param) == "" {
		t.Fatalf("preview URL %q", la.URL)
	}

	// A browser resolves *.localhost to the loopback itself; so does this client.
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}}
	get := func(u string) (int, string) {
		t.Helper()
		res, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, strings.TrimSpace(string(body))
	}
	bare := func(l environments.PreviewLink) string {
		v, _ := url.Parse(l.URL)
		v.RawQuery = ""
		return v.String() + "index.html"
	}
	// Each environment's page says a word of its own.
	code, first := get(la.URL)
	if code != 200 || len(first) != 8 {
		t.Fatalf("through the link: %d %q", code, first)
	}
	if code, body := get(bare(la)); code != 200 || body != first {
		t.Fatalf("through the cookie: %d %q, want %s", code, body, first)
	}
	// Requests through a preview are the environment's activity.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		e := s.wait(t, a, domain.StateReady)
		if e.IdleUntil.After(leased.IdleUntil) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle deadline %s, not moved by the preview's requests", e.IdleUntil)
		}
	}
	// A's cookie is A's host's only: B's preview without its own link refuses.
	if code, body := get(bare(lb)); code != http.StatusForbidden || !strings.Contains(body, "envlease-preview-refused") {
		t.Fatalf("another environment's preview with A's cookie: %d %q", code, body)
	}

	// Its creation and its first use are events, with who and from where.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		page, err := s.Store.ListEvents(context.Background(), "acme", domain.EventQuery{Type: domain.EventEnvPreview, Limit: 50}, s.Clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		actions := map[string]bool{}
		for _, ev := range page.Events {
			// Created: by the caller, from its address (the test's requests
			// come from an example address); opened: by the browser, from
			// the loopback.
			created := ev.Data["action"] == "created" && ev.Actor.ID == "bob" && ev.Data["from"] != ""
			opened := ev.Data["action"] == "opened" && ev.Data["from"] == "127.0.0.1" && ev.Data["userAgent"] != ""
			if ev.Subject.ID == a && ev.Data["preview"] == la.ID && (created || opened) {
				actions[ev.Data["action"].(string)] = true
			}
		}
		if actions["created"] && actions["opened"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("preview events of %s: %+v", a, page.Events)
		}
	}

	var list struct {
		Previews []environments.PreviewLink `json:"previews"`
	}
	s.Do("GET", "/v1/environments/"+a+"/previews", apitest.BobToken, nil).JSON(t, &list)
	if len(list.Previews) != 1 || list.Previews[0].URL != la.URL {
		t.Fatalf("listing: %+v, want the one link", list.Previews)
	}

	if r := s.Do("DELETE", "/v1/environments/"+a+"/previews/"+la.ID, apitest.BobToken, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := get(bare(la))
		if code == http.StatusForbidden && strings.Contains(body, "envlease-preview-refused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked preview still opens: %d %q", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Do("GET", "/v1/environments/"+a+"/previews", apitest.BobToken, nil).JSON(t, &list)
	if len(list.Previews) != 1 || list.Previews[0].Revoked == nil || list.Previews[0].URL != "" {
		t.Fatalf("listing after revoking: %+v", list.Previews)
	}
}

// A public export's preview host opens without a token; an organization's
// longest preview bounds what a link may ask for.
func TestAgentServesPublicExports(t *testing.T) {
	s := newStack(t, domain.Template{
		Name:    "pub",
		Command: []string{"sh", "-c", `echo public-page > index.html; exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
		Exports: map[string]domain.Export{"web": {Port: 0, Public: true}},
	}, domain.Template{
		Name:    "priv",
		Command: []string{"sh", "-c", `echo private-page > index.html; exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
		Exports: map[string]domain.Export{"web": {Port: 0}},
	})
	s.Clock.Set(time.Now())
	ctx := context.Background()
	org, err := s.Store.GetOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	org.MaxPreviewLifetime = domain.Duration(30 * time.Minute)
	if err := s.Store.PutOrg(ctx, org); err != nil {
		t.Fatal(err)
	}
	s.runAgent(t, time.Second)
	pub, priv := s.lease(t, "pub"), s.lease(t, "priv")
	s.wait(t, pub, domain.StateReady)
	s.wait(t, priv, domain.StateReady)

	if r := s.Do("POST", "/v1/environments/"+pub+"/previews", apitest.BobToken, map[string]any{"expires": "1h"}); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a preview longer than the organization's longest: %d %s", r.Status, r.Body)
	}
	hosts := map[string]string{}
	for _, id := range []string{pub, priv} {
		r := s.Do("POST", "/v1/environments/"+id+"/previews", apitest.BobToken, map[string]any{"expires": "20m"})
		if r.Status != http.StatusCreated {
			t.Fatalf("preview: %d %s", r.Status, r.Body)
		}
		var l environments.PreviewLink
		r.JSON(t, &l)
		u, _ := url.Parse(l.URL)
		hosts[id] = "http://" + u.Host + "/index.html" // without the token
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}}
	// Once the organization forbids public exports, an environment claimed
	// from then on opens none without a token.
	org.ForbidPublicExports = true
	if err := s.Store.PutOrg(ctx, org); err != nil {
		t.Fatal(err)
	}
	late := s.lease(t, "pub")
	s.wait(t, late, domain.StateReady)
	r := s.Do("POST", "/v1/environments/"+late+"/previews", apitest.BobToken, map[string]any{"expires": "20m"})
	var ll environments.PreviewLink
	r.JSON(t, &ll)
	lu, _ := url.Parse(ll.URL)
	hosts[late] = "http://" + lu.Host + "/index.html"

	for id, want := range map[string]int{pub: 200, priv: 403, late: 403} {
		res, err := c.Get(hosts[id])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want || (want == 200) != strings.Contains(string(body), "public-page") {
			t.Errorf("%s without a token: %d %q, want %d", id, res.StatusCode, body, want)
		}
	}
}
