package environments_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/httpapi"
)

// The API reads recent samples from the address a node registered, from
// inside the control plane's network: a node's answer that redirects
// elsewhere (an internal address, say) is not followed, and the relay says
// the node did not answer.
func TestRecentMetricsFollowsNoRedirect(t *testing.T) {
	var reached atomic.Int32
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		fmt.Fprintln(w, `{"time":"2026-03-14T09:00:05Z","cpu":1.5,"memory":1048576,"processes":1,"netIn":0,"netOut":0}`)
	}))
	defer inside.Close()
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inside.URL+"/latest/meta-data", http.StatusFound)
	}))
	defer node.Close()

	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, nil) })
	cr := e.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": "local", "name": "rack"})
	cred, _ := cr.Map(t)["token"].(string)
	r := e.Do(http.MethodPost, "/v1/nodes", cred, map[string]any{"name": "n1", "address": "127.0.0.1", "capacity": 4,
		"tunnelURL": "ws://" + strings.TrimPrefix(node.URL, "http://") + "/tunnel"})
	n1, _ := r.Map(t)["node"].(map[string]any)["id"].(string)
	if n1 == "" {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	lease := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "shell"})
	env, _ := lease.Map(t)["environment"].(map[string]any)["id"].(string)
	e.Clock.Advance(1500 * time.Millisecond)
	if r := e.Do(http.MethodPost, "/v1/nodes/"+n1+"/claim?wait=1s", cred, nil); r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodPost, "/v1/nodes/"+n1+"/environments/"+env+"/report", cred, map[string]any{"state": "ready",
		"exports": []map[string]string{{"service": "web", "target": "127.0.0.1:41234"}}}); r.Status != http.StatusOK {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}

	got := e.Do(http.MethodGet, "/v1/environments/"+env+"/metrics/recent", apitest.BobToken, nil)
	if got.Status != http.StatusServiceUnavailable {
		t.Errorf("a node that redirects: %d %s, want 503", got.Status, got.Body)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the redirect's target was asked %d times, want none", n)
	}
}
