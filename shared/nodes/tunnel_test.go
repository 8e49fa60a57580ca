package nodes_test

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

const tunnelURL = "ws://127.0.0.1:7443/tunnel"

// registerTunnels registers a node that serves tunnels at url ("" for
// none) and returns its registration.
func (e *env) registerTunnels(t *testing.T, token, url string) nodes.Registered {
	t.Helper()
	r := e.Do("POST", "/v1/nodes", token, map[string]any{"name": "n1", "address": "127.0.0.1", "capacity": 4, "tunnelURL": url})
	if r.Status != 201 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the registration carries a key and may be cached: %v", r.Header)
	}
	var out nodes.Registered
	r.JSON(t, &out)
	return out
}

// Registration gives each node a tunnel key of its own, shown only in that
// answer, and records the URL its agent serves tunnels at; a URL clients
// could not dial as given is refused.
func TestRegistrationTunnelKeyAndURL(t *testing.T) {
	e := newEnv(t)
	cred := e.credential(t, apitest.AliceToken, "local")
	a := e.registerTunnels(t, cred, tunnelURL)
	b := e.registerTunnels(t, cred, "")
	ka, err := base64.RawURLEncoding.DecodeString(a.TunnelKey)
	if err != nil || len(ka) != ticket.KeySize || a.Organization != "acme" || a.Node.TunnelURL != tunnelURL {
		t.Fatalf("registered: key %q (%v), organization %q, url %q", a.TunnelKey, err, a.Organization, a.Node.TunnelURL)
	}
	if b.TunnelKey == a.TunnelKey || b.Node.TunnelURL != "" {
		t.Fatalf("two nodes share a key, or a node without tunnels has a URL: %+v", b.Node)
	}
	list := e.Do("GET", "/v1/nodes", apitest.AliceToken, nil)
	if list.Status != 200 || strings.Contains(string(list.Body), a.TunnelKey) || !strings.Contains(string(list.Body), tunnelURL) {
		t.Fatalf("listing: %d %s", list.Status, list.Body)
	}
	for _, bad := range []string{"http://127.0.0.1:7443/tunnel", "ws:///tunnel", "ws://u:p@127.0.0.1/tunnel", "ws://127.0.0.1/tunnel?x=1", "ws://127.0.0.1/tunnel#f", "127.0.0.1:7443", "wss://" + strings.Repeat("a", 300)} {
		r := e.Do("POST", "/v1/nodes", cred, map[string]any{"address": "127.0.0.1", "capacity": 1, "tunnelURL": bad})
		if r.Status != 422 || r.Map(t)["field"] != "tunnelURL" {
			t.Errorf("tunnelURL %.40q: %d %s", bad, r.Status, r.Body)
		}
	}
}

// A tunnel ticket is given for a ready environment only, signed with the key
// of the node that runs it, naming the organization, the environment, the
// node and the export targets, for five minutes; it is 404 for another
// organization and 409, saying why, for an environment not ready, ended, or
// on a node without tunnels.
func TestTunnelTicket(t *testing.T) {
	e := newEnv(t)
	cred := e.credential(t, apitest.AliceToken, "local")
	reg := e.registerTunnels(t, cred, tunnelURL)
	node := reg.Node.ID
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	path := "/v1/environments/" + id + "/tunnel"

	conflict := func(want string) {
		t.Helper()
		r := e.Do("POST", path, apitest.BobToken, nil)
		if r.Status != 409 || !strings.Contains(r.Map(t)["error"].(string), want) {
			t.Fatalf("tunnel: %d %s, want 409 saying %q", r.Status, r.Body, want)
		}
	}
	conflict("is pending: a tunnel opens once it is ready")
	if c, r := e.claim(t, cred, node, "1s"); c == nil || c.Environment.ID != id {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	conflict("is starting")
	if r := e.report(cred, node, id, map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:8080"}}}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}

	r := e.Do("POST", path, apitest.BobToken, nil)
	if r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("tunnel: %d %v %s", r.Status, r.Header, r.Body)
	}
	var tk environments.Tunnel
	r.JSON(t, &tk)
	key, _ := base64.RawURLEncoding.DecodeString(reg.TunnelKey)
	c, err := ticket.Verify(key, tk.Ticket, e.Clock.Now())
	if err != nil {
		t.Fatalf("the node cannot check its ticket: %v", err)
	}
	if tk.URL != tunnelURL || c.Org != "acme" || c.Env != id || c.Node != node || !slices.Equal(c.Targets, []string{"127.0.0.1:8080"}) ||
		!c.Expires().Equal(tk.Expires) || tk.Expires.Sub(e.Clock.Now()) > environments.TunnelTicketTTL || tk.Expires.Sub(e.Clock.Now()) < environments.TunnelTicketTTL-time.Second {
		t.Fatalf("ticket %+v says %+v", tk, c)
	}
	// Another organization learns nothing; a node may not ask.
	if r := e.Do("POST", path, apitest.CarolToken, nil); r.Status != 404 {
		t.Fatalf("another organization: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", path, cred, nil); r.Status != 403 {
		t.Fatalf("a node credential: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", path, apitest.BobToken, map[string]any{"ttl": "1h"}); r.Status != 400 {
		t.Fatalf("with a body: %d %s", r.Status, r.Body)
	}

	// The environment ends: no more tickets.
	if r := e.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	conflict("is stopping: it no longer runs")

	// A node whose agent serves no tunnels cannot be tunnelled to.
	if r := e.Do("DELETE", "/v1/nodes/"+node, cred, nil); r.Status != 200 {
		t.Fatalf("deregister: %d %s", r.Status, r.Body)
	}
	plain := e.registerTunnels(t, cred, "").Node.ID
	id = e.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	path = "/v1/environments/" + id + "/tunnel"
	if c, r := e.claim(t, cred, plain, "1s"); c == nil || c.Environment.ID != id {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.report(cred, plain, id, map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:8080"}}}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	conflict("serves no tunnels")
}
