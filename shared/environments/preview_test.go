package environments_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/httpapi"
)

// readyPreviewEnv leases a shell environment with bob's token and makes it
// ready, with one web export, on a node whose tunnel endpoint is on the
// loopback (so its previews are served under localhost).
func readyPreviewEnv(t *testing.T, e *apitest.Env) string {
	t.Helper()
	cr := e.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": "local", "name": "rack"})
	cred, _ := cr.Map(t)["token"].(string)
	reg := e.Do(http.MethodPost, "/v1/nodes", cred, map[string]any{"name": "n1", "address": "127.0.0.1", "capacity": 4,
		"tunnelURL": "ws://127.0.0.1:7443/tunnel"})
	node, _ := reg.Map(t)["node"].(map[string]any)["id"].(string)
	lease := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "shell"})
	id, _ := lease.Map(t)["environment"].(map[string]any)["id"].(string)
	if node == "" || id == "" {
		t.Fatalf("register %d %s; lease %d %s", reg.Status, reg.Body, lease.Status, lease.Body)
	}
	e.Clock.Advance(1500 * time.Millisecond)
	if r := e.Do(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=1s", cred, nil); r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	ready := map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:41234"}}}
	if r := e.Do(http.MethodPost, "/v1/nodes/"+node+"/environments/"+id+"/report", cred, ready); r.Status != http.StatusOK {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	return id
}

// shortToken mints a token of bob's that expires in d.
func shortToken(t *testing.T, e *apitest.Env, d string) string {
	t.Helper()
	r := e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "short", "expiresIn": d})
	tok, _ := r.Map(t)["token"].(string)
	if r.Status != http.StatusCreated || tok == "" {
		t.Fatalf("token: %d %s", r.Status, r.Body)
	}
	return tok
}

// A listing signs a preview's link again only for its creator, and never
// one that outlives the caller's own token: a teammate, or a short-lived
// token, sees the preview without its URL.
func TestListPreviewsShowsLinksOnlyToTheirMaker(t *testing.T) {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, nil) })
	id := readyPreviewEnv(t, e)
	path := "/v1/environments/" + id + "/previews"
	made := e.Do(http.MethodPost, path, apitest.BobToken, map[string]any{"expires": "24h"})
	long, _ := made.Map(t)["id"].(string)
	if made.Status != http.StatusCreated || long == "" {
		t.Fatalf("create: %d %s", made.Status, made.Body)
	}
	short := shortToken(t, e, "10m")
	mine := e.Do(http.MethodPost, path, short, map[string]any{"expires": "24h"})
	capped, _ := mine.Map(t)["id"].(string)
	if mine.Status != http.StatusCreated || capped == "" {
		t.Fatalf("create with a short token: %d %s", mine.Status, mine.Body)
	}
	if at, err := time.Parse(time.RFC3339, mine.Map(t)["expires"].(string)); err != nil || at.After(e.Clock.Now().Add(10*time.Minute)) {
		t.Fatalf("a preview outlives the 10-minute token that made it: %s", mine.Body)
	}
	for _, c := range []struct {
		name, token string
		urls        map[string]bool // preview id: whether its URL is shown
	}{
		{"creator", apitest.BobToken, map[string]bool{long: true, capped: true}},
		{"creator's short token", short, map[string]bool{long: false, capped: true}},
		{"teammate admin", apitest.AliceToken, map[string]bool{long: false, capped: false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do(http.MethodGet, path, c.token, nil)
			var body struct {
				Previews []struct {
					ID  string `json:"id"`
					URL string `json:"url"`
				} `json:"previews"`
			}
			r.JSON(t, &body)
			if r.Status != http.StatusOK || len(body.Previews) != 2 {
				t.Fatalf("list: %d %s", r.Status, r.Body)
			}
			for _, pv := range body.Previews {
				if want := c.urls[pv.ID]; (pv.URL != "") != want {
					t.Errorf("preview %s: url %q, want shown %v", pv.ID, pv.URL, want)
				}
			}
		})
	}
}
