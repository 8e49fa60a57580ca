//go:build linux

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
	"github.com/envlease/envlease/shared/timeouts"
)

// A preview link made before its environment paused wakes it, by the link
// and by the cookie it was traded for: the node it was made on asks the API
// where the environment goes, the API wakes it on the node of the pool that
// can take it (here another node, the first being full), and the browser is
// sent there and served the files the environment made before the pause.
// Paused again, the same link wakes it on the node that now holds the link's
// cookie. Both runtimes, for real.
func TestPreviewWakesPausedEnvironment(t *testing.T) {
	t.Run("process", func(t *testing.T) {
		previewWakes(t, domain.Template{Name: "napweb", Runtime: agent.RuntimeProcess,
			Command: []string{"sh", "-c", `[ -e note.txt ] || mktemp -u XXXXXXXX > note.txt; exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
			Exports: map[string]domain.Export{"web": {Port: 0}}})
	})
	t.Run("container", func(t *testing.T) {
		ref := busyboxRef(t)
		previewWakes(t, domain.Template{Name: "napweb", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref},
			Command: []string{"sh", "-c", `cd /work; [ -e note.txt ] || echo "$RANDOM$RANDOM$RANDOM" > note.txt; exec httpd -f -p "$PORT" -h /work`},
			Workdir: "/work", Exports: map[string]domain.Export{"web": {Port: 8080}}})
	})
}

func previewWakes(t *testing.T, web domain.Template) {
	web.Idle = &domain.Idle{Action: domain.IdlePause, Retention: domain.Duration(time.Hour)}
	s, _ := withArtifacts(t, web, domain.Template{Name: "filler", Runtime: agent.RuntimeProcess, Command: []string{"sleep", "3600"}})
	one := func(c *agent.Config) { c.Capacity, c.ReadyTimeout = 1, time.Minute }
	s.runAgentWith(t, t.TempDir(), time.Second, one)
	ctx := context.Background()

	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "napweb", "idle": "1s"})
	if r.Status != http.StatusCreated {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var leased environments.Leased
	r.JSON(t, &leased)
	id := leased.Environment.ID
	first := s.waitLong(t, id, domain.StateReady)
	r = s.Do("POST", "/v1/environments/"+id+"/previews", apitest.BobToken, map[string]any{"expires": "1h"})
	if r.Status != http.StatusCreated {
		t.Fatalf("preview: %d %s", r.Status, r.Body)
	}
	var link environments.PreviewLink
	r.JSON(t, &link)

	// A browser: *.localhost is the loopback, cookies are kept per host.
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}}
	// open asks as a browser would: a waking page reloads by itself.
	open := func(u string) string {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); ; {
			res, err := c.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return strings.TrimSpace(string(body))
			}
			if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "envlease-preview-waking") ||
				res.Header.Get("Refresh") == "" || time.Now().After(deadline) {
				t.Fatalf("GET %s: %d %s", u, res.StatusCode, body)
			}
		}
	}
	at := func(l string) string { // the link's address without its token
		u, _ := url.Parse(l)
		u.RawQuery = ""
		return u.String() + "note.txt"
	}
	// notePath is the link (its token kept) to the note.
	notePath := func(l string) string {
		u, _ := url.Parse(l)
		u.Path = "/note.txt"
		return u.String()
	}
	note := open(notePath(link.URL))
	if len(note) < 5 {
		t.Fatalf("the environment's note: %q", note)
	}

	pause := func() {
		t.Helper()
		time.Sleep(1500 * time.Millisecond) // past its 1 s idle deadline
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
			s.Clock.Set(time.Now())
			if _, err := timeouts.Run(ctx, s.Store, s.Clock, timeouts.Options{}); err != nil {
				t.Fatal(err)
			}
			e, err := s.Store.GetEnvironment(ctx, "acme", id)
			if err != nil {
				t.Fatal(err)
			}
			if e.State == domain.StatePaused && e.Node == "" {
				return
			}
			if e.State != domain.StateReady && e.State != domain.StatePaused || time.Now().After(deadline) {
				t.Fatalf("went %s (%s: %s) instead of paused", e.State, e.StopReason, e.Error)
			}
		}
	}
	pause()
	// Its node is taken by another environment, and a second node joins:
	// only the second can run it when it wakes.
	filler := s.lease(t, "filler")
	s.waitLong(t, filler, domain.StateReady)
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.ReadyTimeout = time.Minute })

	// The cookie alone, at the first node's address: woken on the second,
	// the browser is sent there and served the note kept by the checkpoint.
	if got := open(at(link.URL)); got != note {
		t.Fatalf("through the cookie after the pause: %q, want %q", got, note)
	}
	woken, err := s.Store.GetEnvironment(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if woken.State != domain.StateReady || woken.Resumed == nil || woken.Node == "" || woken.Node == first.Node {
		t.Fatalf("woken on %s (first on %s): %+v", woken.Node, first.Node, woken)
	}
	// The link itself, made on the first node, opens too.
	if got := open(notePath(link.URL)); got != note {
		t.Fatalf("the first link after the wake: %q, want %q", got, note)
	}
	// The listing's link is the second node's now.
	var list struct {
		Previews []environments.PreviewLink `json:"previews"`
	}
	s.Do("GET", "/v1/environments/"+id+"/previews", apitest.BobToken, nil).JSON(t, &list)
	if len(list.Previews) != 1 || list.Previews[0].URL == "" || list.Previews[0].URL == link.URL {
		t.Fatalf("listing after the move: %+v", list.Previews)
	}

	// Paused again: the cookie the second node set, at the second node's
	// address, wakes it there (the first is still full), its files as they
	// were; the first link still opens it.
	pause()
	if got := open(at(list.Previews[0].URL)); got != note {
		t.Fatalf("the second node's cookie after the second pause: %q, want %q", got, note)
	}
	if got := open(notePath(link.URL)); got != note {
		t.Fatalf("the first link after the second wake: %q, want %q", got, note)
	}

	// A revoked link wakes nothing: paused once more, revoked, refused.
	pause()
	if r := s.Do("DELETE", "/v1/environments/"+id+"/previews/"+link.ID, apitest.BobToken, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke while paused: %d %s", r.Status, r.Body)
	}
	res, err := c.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "envlease-preview-refused") {
		t.Fatalf("a revoked link to a paused environment: %d %s", res.StatusCode, body)
	}
	if e, _ := s.Store.GetEnvironment(ctx, "acme", id); e.State != domain.StatePaused {
		t.Fatalf("a revoked link woke it: %s", e.State)
	}
}
