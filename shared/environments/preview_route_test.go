package environments_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/preview"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// A node asks where a preview link it signed goes now: only with its own
// credential and its own token, for a preview that still opens. The
// answer is the same preview's link (its id and expiry) on the node that
// runs the environment; a revoked preview is 410.
func TestPreviewRouteAnswersOnlyTheSigningNode(t *testing.T) {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, nil) })
	cr := e.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": "local", "name": "rack"})
	cred, _ := cr.Map(t)["token"].(string)
	register := func(name, port string) string {
		r := e.Do(http.MethodPost, "/v1/nodes", cred, map[string]any{"name": name, "address": "127.0.0.1", "capacity": 4,
			"tunnelURL": "ws://127.0.0.1:" + port + "/tunnel"})
		id, _ := r.Map(t)["node"].(map[string]any)["id"].(string)
		if id == "" {
			t.Fatalf("register: %d %s", r.Status, r.Body)
		}
		return id
	}
	n1 := register("n1", "7443")
	lease := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "shell"})
	env, _ := lease.Map(t)["environment"].(map[string]any)["id"].(string)
	e.Clock.Advance(1500 * time.Millisecond)
	if r := e.Do(http.MethodPost, "/v1/nodes/"+n1+"/claim?wait=1s", cred, nil); r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	ready := map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:41234"}}}
	if r := e.Do(http.MethodPost, "/v1/nodes/"+n1+"/environments/"+env+"/report", cred, ready); r.Status != http.StatusOK {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	n2 := register("n2", "7444")
	made := e.Do(http.MethodPost, "/v1/environments/"+env+"/previews", apitest.BobToken, nil)
	m := made.Map(t)
	pv, _ := m["id"].(string)
	link, _ := url.Parse(m["url"].(string))
	tok := link.Query().Get(preview.Param)
	route := func(node, pv, tok, as string) *apitest.Response {
		return e.Do(http.MethodPost, "/v1/nodes/"+node+"/environments/"+env+"/previews/"+pv+"/route", as, map[string]any{"token": tok})
	}

	r := route(n1, pv, tok, cred)
	if r.Status != http.StatusOK || r.Map(t)["node"] != n1 {
		t.Fatalf("route: %d %s", r.Status, r.Body)
	}
	again, _ := url.Parse(r.Map(t)["url"].(string))
	if again.Host != link.Host || again.Query().Get(preview.Param) != tok {
		t.Errorf("the same node's link %s, want %s", again, link)
	}
	for _, c := range []struct {
		name, node, pv, tok, as string
		status                  int
	}{
		{"another node with the first's token", n2, pv, tok, cred, http.StatusGone},
		{"a person's token", n1, pv, tok, apitest.BobToken, http.StatusForbidden},
		{"another preview's id", n1, "pv_other", tok, cred, http.StatusUnprocessableEntity},
		{"a tampered token", n1, pv, strings.Replace(tok, ".", ".x", 1), cred, http.StatusGone},
		{"another node id", "node_nope", pv, tok, cred, http.StatusNotFound},
	} {
		if r := route(c.node, c.pv, c.tok, c.as); r.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.status)
		}
	}
	if r := e.Do(http.MethodDelete, "/v1/environments/"+env+"/previews/"+pv, apitest.BobToken, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if r := route(n1, pv, tok, cred); r.Status != http.StatusGone {
		t.Errorf("a revoked preview: %d %s", r.Status, r.Body)
	}
}

// A node holds the key it signs its links with, so it can sign a token for
// any environment of its organization: one of another pool, which it never
// ran, gets no link (nor a wake) from the route, however it names it.
func TestPreviewRouteRefusesANodeOfAnotherPool(t *testing.T) {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, nil) })
	credFor := func(pool string) string {
		cr := e.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": pool, "name": "rack-" + pool})
		cred, _ := cr.Map(t)["token"].(string)
		if cred == "" {
			t.Fatalf("credential for %s: %d %s", pool, cr.Status, cr.Body)
		}
		return cred
	}
	org, err := e.Store.GetOrg(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	org.Pools = append(org.Pools, "other")
	if err := e.Store.PutOrg(context.Background(), org); err != nil {
		t.Fatal(err)
	}
	cred, other := credFor("local"), credFor("other")
	register := func(cred, name, port string) map[string]any {
		r := e.Do(http.MethodPost, "/v1/nodes", cred, map[string]any{"name": name, "address": "127.0.0.1", "capacity": 4,
			"tunnelURL": "ws://127.0.0.1:" + port + "/tunnel"})
		m := r.Map(t)
		if id, _ := m["node"].(map[string]any)["id"].(string); id == "" {
			t.Fatalf("register: %d %s", r.Status, r.Body)
		}
		return m
	}
	n1 := register(cred, "n1", "7443")["node"].(map[string]any)["id"].(string)
	lease := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "shell"})
	env, _ := lease.Map(t)["environment"].(map[string]any)["id"].(string)
	e.Clock.Advance(1500 * time.Millisecond)
	if r := e.Do(http.MethodPost, "/v1/nodes/"+n1+"/claim?wait=1s", cred, nil); r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	ready := map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:41234"}}}
	if r := e.Do(http.MethodPost, "/v1/nodes/"+n1+"/environments/"+env+"/report", cred, ready); r.Status != http.StatusOK {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	made := e.Do(http.MethodPost, "/v1/environments/"+env+"/previews", apitest.BobToken, nil)
	pv, _ := made.Map(t)["id"].(string)

	reg := register(other, "n3", "7445")
	n3 := reg["node"].(map[string]any)["id"].(string)
	key, err := base64.RawURLEncoding.DecodeString(reg["tunnelKey"].(string))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := ticket.Sign(key, ticket.Claims{Org: reg["organization"].(string), Env: env, Node: n3, Targets: []string{"127.0.0.1:41234"},
		Exp: e.Clock.Now().Add(time.Hour).Unix(), Open: ticket.OpenPreview, Preview: pv, Host: "x.example"})
	if err != nil {
		t.Fatal(err)
	}
	r := e.Do(http.MethodPost, "/v1/nodes/"+n3+"/environments/"+env+"/previews/"+pv+"/route", other, map[string]any{"token": forged})
	if r.Status == http.StatusOK || strings.Contains(string(r.Body), preview.Param) {
		t.Fatalf("a node of another pool got a link: %d %s", r.Status, r.Body)
	}
}
