package nodes_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
)

// stubLinks signs nothing: it returns a recognisable URL, so a claim's
// snapshot link can be checked without S3.
type stubLinks struct{}

func (stubLinks) LinkFor(_ context.Context, a domain.Artifact, ttl time.Duration) (domain.Link, error) {
	return domain.Link{URL: "https://s3.example/" + a.Key + "?ttl=" + ttl.String(), Expires: apitest.Start.Add(ttl)}, nil
}

type env struct {
	*apitest.Env
	svc *nodes.Service
}

func newEnv(t *testing.T) *env {
	t.Helper()
	var svc *nodes.Service
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		svc = nodes.NewService(e.Store, stubLinks{}, e.Clock, nodes.Options{PollMin: 5 * time.Millisecond, PollMax: 20 * time.Millisecond})
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, e.Clock))}
	})
	return &env{Env: e, svc: svc}
}

// credential issues a node credential of pool as an admin's token.
func (e *env) credential(t *testing.T, admin, pool string) string {
	t.Helper()
	r := e.Do("POST", "/v1/nodes/credentials", admin, map[string]any{"pool": pool, "name": "rack-1"})
	if r.Status != 201 {
		t.Fatalf("issue credential: %d %s", r.Status, r.Body)
	}
	var out struct {
		Token  string `json:"token"`
		APIKey struct {
			Owner map[string]string `json:"owner"`
		} `json:"apiKey"`
	}
	r.JSON(t, &out)
	if !strings.HasPrefix(out.Token, "els_node_") || out.APIKey.Owner["kind"] != "pool" || out.APIKey.Owner["id"] != pool {
		t.Fatalf("credential: %s", r.Body)
	}
	return out.Token
}

func (e *env) register(t *testing.T, token string, capacity int) string {
	t.Helper()
	r := e.Do("POST", "/v1/nodes", token, map[string]any{"name": "n1", "address": "127.0.0.1", "capacity": capacity, "agent": "test"})
	if r.Status != 201 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	var out nodes.Registered
	r.JSON(t, &out)
	if out.Node.State != domain.NodeActive || out.LostAfter.Std() != nodes.DefaultLostAfter || len(out.Templates) == 0 ||
		out.ClaimWait.Std() != 20*time.Second || nodes.MaxClaimWait != 20*time.Second {
		t.Fatalf("registered: %s", r.Body)
	}
	return out.Node.ID
}

func (e *env) lease(t *testing.T, token string, body map[string]any) string {
	t.Helper()
	r := e.Do("POST", "/v1/environments", token, body)
	if r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var out environments.Leased
	r.JSON(t, &out)
	return out.Environment.ID
}

func (e *env) claim(t *testing.T, token, node, wait string) (*nodes.Claimed, *apitest.Response) {
	t.Helper()
	r := e.Do("POST", "/v1/nodes/"+node+"/claim?wait="+wait, token, nil)
	if r.Status == 204 {
		return nil, r
	}
	if r.Status != 200 {
		return nil, r
	}
	var c nodes.Claimed
	r.JSON(t, &c)
	return &c, r
}

func (e *env) report(token, node, id string, body any) *apitest.Response {
	return e.Do("POST", "/v1/nodes/"+node+"/environments/"+id+"/report", token, body)
}

func (e *env) get(t *testing.T, token, id string) domain.Environment {
	t.Helper()
	r := e.Do("GET", "/v1/environments/"+id, token, nil)
	var out domain.Environment
	r.JSON(t, &out)
	if out.ID != id {
		t.Fatalf("get %s: %d %s", id, r.Status, r.Body)
	}
	return out
}

func (e *env) running(t *testing.T, org, template string) int {
	t.Helper()
	qs, err := e.Store.ListQuotas(context.Background(), org)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Template == template {
			return q.Running
		}
	}
	t.Fatalf("no quota for %s", template)
	return 0
}

func TestNodeCredentialsServeOnlyTheNodeAPI(t *testing.T) {
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")

	for _, c := range []struct {
		token string
		body  any
		want  int
	}{
		{apitest.BobToken, `{"pool":"local","name":"x"}`, 403},   // a member
		{tok, `{"pool":"local","name":"x"}`, 403},                // a node credential
		{apitest.AliceToken, `{"pool":"cloud","name":"x"}`, 422}, // not a pool of acme
		{apitest.AliceToken, `{"pool":"local"}`, 422},            // no name
		{apitest.AliceToken, `{"pool":"local","nam":"x"}`, 400},  // unknown field
		{"", `{"pool":"local","name":"x"}`, 401},                 // no token
	} {
		if r := e.Do("POST", "/v1/nodes/credentials", c.token, c.body); r.Status != c.want {
			t.Errorf("issue %v: %d %s", c.body, r.Status, r.Body)
		}
	}
	// The node credential is refused everywhere but the node API...
	if r := e.Do("GET", "/v1/environments", tok, nil); r.Status != 403 || !strings.Contains(string(r.Body), "node API") {
		t.Fatalf("node credential on environments: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/v1/nodes", tok, nil); r.Status != 403 {
		t.Fatalf("node credential listing nodes: %d", r.Status)
	}
	// ...and people cannot act as nodes.
	if r := e.Do("POST", "/v1/nodes", apitest.AliceToken, `{"address":"10.0.0.1","capacity":1}`); r.Status != 403 {
		t.Fatalf("admin registering a node: %d", r.Status)
	}
	for _, body := range []string{`{"address":"","capacity":1}`, `{"address":"10.0.0.1:80","capacity":1}`,
		`{"address":"http://x","capacity":1}`, `{"address":"10.0.0.1","capacity":0}`} {
		if r := e.Do("POST", "/v1/nodes", tok, body); r.Status != 422 {
			t.Errorf("register %s: %d %s", body, r.Status, r.Body)
		}
	}
	id := e.register(t, tok, 2)
	r := e.Do("GET", "/v1/nodes", apitest.AliceToken, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), id) {
		t.Fatalf("list nodes: %d %s", r.Status, r.Body)
	}
	// Another organization's admin sees none of it, and another credential
	// cannot act as the node.
	if r := e.Do("GET", "/v1/nodes", apitest.CarolToken, nil); strings.Contains(string(r.Body), id) {
		t.Fatalf("globex sees acme's node: %s", r.Body)
	}
	other := e.credential(t, apitest.AliceToken, "local")
	if r := e.Do("POST", "/v1/nodes/"+id+"/heartbeat", other, nil); r.Status != 404 {
		t.Fatalf("another credential's heartbeat: %d %s", r.Status, r.Body)
	}
}

// The spec's flow from the node's side: claim, starting, ready with targets,
// the client deletes, the heartbeat says stopping, stopped; then illegal
// reports are 409 and the quota was released once.
func TestClaimReportAndStop(t *testing.T) {
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 4)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "shell"})

	e.Clock.Advance(1500 * time.Millisecond)
	c, r := e.claim(t, tok, node, "1s")
	if c == nil {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if c.Environment.ID != id || c.Environment.State != domain.StateStarting || c.Environment.Node != node ||
		c.Template.Name != "shell" || len(c.Template.Command) == 0 || c.Template.Exports["web"].Port != 8080 || c.Snapshot != nil {
		t.Fatalf("claimed: %s", r.Body)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("claim cache control %q", r.Header.Get("Cache-Control"))
	}
	if got := e.get(t, apitest.BobToken, id); got.State != domain.StateStarting || got.Node != node {
		t.Fatalf("after claim: %+v", got)
	}
	if r := e.report(tok, node, id, map[string]any{"state": "starting"}); r.Status != 200 {
		t.Fatalf("starting: %d %s", r.Status, r.Body)
	}
	for _, bad := range []map[string]any{
		{"state": "ready"}, // no target for web
		{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "nohost"}}},
		{"state": "ready", "exports": []map[string]string{{"service": "db", "target": "127.0.0.1:5432"}}},
		{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:1"}},
			"restored": map[string]any{"key": "k", "root": "/r", "files": 1, "created": "2026-03-14T09:00:00Z"}},
		{"state": "failed"},
		{"state": "pending"},
		{"state": "stopped", "error": "x"},
	} {
		if r := e.report(tok, node, id, bad); r.Status != 422 {
			t.Errorf("report %v: %d %s", bad, r.Status, r.Body)
		}
	}
	e.Clock.Advance(500 * time.Millisecond)
	ready := map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:41234"}}}
	r = e.report(tok, node, id, ready)
	if r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	got := e.get(t, apitest.BobToken, id)
	if got.State != domain.StateReady || got.ReadyMs == nil || *got.ReadyMs != 2000 || got.Ready == nil ||
		len(got.Exports) != 1 || got.Exports[0].Target != "127.0.0.1:41234" {
		t.Fatalf("ready record: %+v", got)
	}
	// A retried ready is harmless; a different one is a conflict.
	if r := e.report(tok, node, id, ready); r.Status != 200 {
		t.Fatalf("ready again: %d %s", r.Status, r.Body)
	}
	if r := e.report(tok, node, id, map[string]any{"state": "starting"}); r.Status != 409 {
		t.Fatalf("starting after ready: %d %s", r.Status, r.Body)
	}
	if e.running(t, "acme", "shell") != 1 {
		t.Fatal("running is not 1 while ready")
	}

	// The client deletes: stopping, quota released at once; the heartbeat says so.
	if r := e.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"stopping"`) {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if e.running(t, "acme", "shell") != 0 {
		t.Fatal("delete did not release the quota")
	}
	hb := e.Do("POST", "/v1/nodes/"+node+"/heartbeat", tok, map[string]any{"environments": []string{id}})
	var beat nodes.Beat
	hb.JSON(t, &beat)
	if hb.Status != 200 || len(beat.Environments) != 1 || beat.Environments[0].State != domain.StateStopping || len(beat.Templates) != 2 {
		t.Fatalf("heartbeat: %d %s", hb.Status, hb.Body)
	}
	if r := e.report(tok, node, id, ready); r.Status != 409 {
		t.Fatalf("ready while stopping: %d %s", r.Status, r.Body)
	}
	if r := e.report(tok, node, id, map[string]any{"state": "stopped"}); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"stopped"`) {
		t.Fatalf("stopped: %d %s", r.Status, r.Body)
	}
	final := e.get(t, apitest.BobToken, id)
	if final.StopReason != "deleted" || final.Stopped == nil {
		t.Fatalf("final: %+v", final)
	}
	if r := e.report(tok, node, id, map[string]any{"state": "stopped"}); r.Status != 200 {
		t.Fatalf("stopped again: %d", r.Status)
	}
	// The example: ready after stopped is 409; so is failed.
	if r := e.report(tok, node, id, ready); r.Status != 409 || r.Code() != "conflict" {
		t.Fatalf("ready after stopped: %d %s", r.Status, r.Body)
	}
	if r := e.report(tok, node, id, map[string]any{"state": "failed", "error": "late"}); r.Status != 409 {
		t.Fatalf("failed after stopped: %d %s", r.Status, r.Body)
	}
	if e.running(t, "acme", "shell") != 0 {
		t.Fatal("running moved after the stop")
	}
	// Once over, the heartbeat lists it as over (named) and no longer as assigned.
	hb = e.Do("POST", "/v1/nodes/"+node+"/heartbeat", tok, nil)
	if hb.Status != 200 || strings.Contains(string(hb.Body), id) {
		t.Fatalf("heartbeat after stop: %s", hb.Body)
	}
}

// A node's failure report of a live environment goes through the one stop
// path: the quota is released once, however often it is repeated.
func TestFailedReleasesQuotaOnce(t *testing.T) {
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 4)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if c, r := e.claim(t, tok, node, "0s"); c == nil {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if e.running(t, "acme", "sleeper") != 1 {
		t.Fatal("not running")
	}
	stderr := strings.Repeat("noise\n", 2000) + "exit status 3: boom"
	for i := 0; i < 3; i++ {
		r := e.report(tok, node, id, map[string]any{"state": "failed", "error": stderr})
		if r.Status != 200 {
			t.Fatalf("failed %d: %d %s", i, r.Status, r.Body)
		}
	}
	got := e.get(t, apitest.BobToken, id)
	if got.State != domain.StateFailed || got.StopReason != nodes.StopFailed || !strings.HasSuffix(got.Error, "boom") || len(got.Error) > nodes.MaxErrorBytes+8 {
		t.Fatalf("failed record: state %s reason %s error %d bytes", got.State, got.StopReason, len(got.Error))
	}
	if n := e.running(t, "acme", "sleeper"); n != 0 {
		t.Fatalf("running %d after a failure reported three times", n)
	}
	// A node reports only what it runs.
	other := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if r := e.report(tok, node, other, map[string]any{"state": "ready"}); r.Status != 409 {
		t.Fatalf("report of an unclaimed environment: %d %s", r.Status, r.Body)
	}
	if r := e.report(tok, node, "env_nope", map[string]any{"state": "ready"}); r.Status != 404 {
		t.Fatalf("report of an unknown environment: %d %s", r.Status, r.Body)
	}
}

// Two nodes (and many claims each) racing for the same pending environments:
// every environment is claimed exactly once.
func TestClaimIsAtomic(t *testing.T) {
	e := newEnv(t)
	tokA := e.credential(t, apitest.AliceToken, "local")
	tokB := e.credential(t, apitest.AliceToken, "local")
	nodeA, nodeB := e.register(t, tokA, 100), e.register(t, tokB, 100)
	want := map[string]bool{}
	for i := 0; i < 3; i++ {
		want[e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})] = true
	}
	var mu sync.Mutex
	got := map[string][]string{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		for _, nt := range [][2]string{{tokA, nodeA}, {tokB, nodeB}} {
			wg.Add(1)
			go func(tok, node string) {
				defer wg.Done()
				r := e.Do("POST", "/v1/nodes/"+node+"/claim?wait=200ms", tok, nil)
				if r.Status == 204 {
					return
				}
				var c nodes.Claimed
				r.JSON(t, &c)
				mu.Lock()
				got[c.Environment.ID] = append(got[c.Environment.ID], node)
				mu.Unlock()
			}(nt[0], nt[1])
		}
	}
	wg.Wait()
	if len(got) != len(want) {
		t.Fatalf("claimed %d environments, want %d: %v", len(got), len(want), got)
	}
	for id, by := range got {
		if !want[id] || len(by) != 1 {
			t.Fatalf("environment %s claimed by %v", id, by)
		}
		if env := e.get(t, apitest.BobToken, id); env.Node != by[0] || env.State != domain.StateStarting {
			t.Fatalf("record of %s: %+v", id, env)
		}
	}
}

// With nothing pending, a claim waits (long-polls) and takes a lease made
// while it waits; with nothing at all it answers 204 after wait.
func TestClaimLongPolls(t *testing.T) {
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 2)
	start := time.Now()
	if c, r := e.claim(t, tok, node, "300ms"); c != nil || r.Status != 204 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("empty claim: %d after %s", r.Status, time.Since(start))
	}
	for _, q := range []string{"wait=x", "wait=-1s", "hold=1s"} {
		if r := e.Do("POST", "/v1/nodes/"+node+"/claim?"+q, tok, nil); r.Status != 400 {
			t.Errorf("claim ?%s: %d", q, r.Status)
		}
	}
	// The claim waits as long as a claim may, and the test as long as a
	// busy machine may need: the lease comes 150 ms into the wait, but how
	// long it and the claim's next look take is the machine's.
	done := make(chan *nodes.Claimed, 1)
	go func() {
		c, _ := e.claim(t, tok, node, domain.Duration(nodes.MaxClaimWait).String())
		done <- c
	}()
	time.Sleep(150 * time.Millisecond)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	select {
	case c := <-done:
		if c == nil || c.Environment.ID != id {
			t.Fatalf("waiting claim got %+v", c)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiting claim did not take the lease")
	}
	// Capacity 2: one more fills it, and a third claim is refused.
	e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if c, r := e.claim(t, tok, node, "0s"); c == nil {
		t.Fatalf("second claim: %d %s", r.Status, r.Body)
	}
	e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if _, r := e.claim(t, tok, node, "0s"); r.Status != 409 {
		t.Fatalf("claim beyond capacity: %d %s", r.Status, r.Body)
	}
}

// Pool names are per organization: globex's node of its pool "local" never
// sees acme's pending environments of acme's "local".
func TestPoolsArePerOrganization(t *testing.T) {
	e := newEnv(t)
	acme := e.credential(t, apitest.AliceToken, "local")
	globex := e.credential(t, apitest.CarolToken, "local")
	an, gn := e.register(t, acme, 2), e.register(t, globex, 2)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if c, r := e.claim(t, globex, gn, "100ms"); c != nil || r.Status != 204 {
		t.Fatalf("globex claimed acme's environment: %d %s", r.Status, r.Body)
	}
	if c, r := e.claim(t, acme, an, "0s"); c == nil || c.Environment.ID != id {
		t.Fatalf("acme's claim: %d %s", r.Status, r.Body)
	}
	// And a node cannot report another organization's environment.
	if r := e.report(globex, gn, id, map[string]any{"state": "starting"}); r.Status != 404 {
		t.Fatalf("globex reports acme's environment: %d %s", r.Status, r.Body)
	}
}

// A snapshot lease's claim carries a signed link to the artifact; ready then
// needs the restored record, which the environment shows.
func TestClaimCarriesSnapshotLink(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sealed := apitest.Start.Add(-time.Hour)
	art := domain.Artifact{
		ID: "art_snap1", Name: "tree.tar.gz", Size: 10, SHA256: strings.Repeat("a", 64), ContentType: "application/gzip",
		KeyVersion: 1, CreatedBy: "alice", Created: sealed, Expires: apitest.Start.Add(24 * time.Hour),
		State: domain.ArtifactSealed, Sealed: &sealed, OrgID: "acme", Key: "orgs/acme/artifacts/art_snap1/data",
		Labels: map[string]string{}, Segments: []domain.Segment{{Name: "data", Size: 10, Objects: 1}}, Chunks: 1, SealedBytes: 10,
	}
	open := art
	open.State = domain.ArtifactOpen
	if err := e.Store.PutArtifact(ctx, open); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.SealArtifact(ctx, art); err != nil {
		t.Fatal(err)
	}
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 2)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper", "snapshot": "art_snap1"})
	c, r := e.claim(t, tok, node, "0s")
	if c == nil || c.Snapshot == nil || c.Snapshot.ID != "art_snap1" || !strings.Contains(c.Snapshot.URL, art.Key) || c.Snapshot.SHA256 != art.SHA256 {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.report(tok, node, id, map[string]any{"state": "ready"}); r.Status != 422 {
		t.Fatalf("ready without restored: %d %s", r.Status, r.Body)
	}
	restored := map[string]any{"key": "art_snap1", "root": "/var/envlease/" + id, "files": 3, "created": "2026-03-14T08:00:00Z"}
	if r := e.report(tok, node, id, map[string]any{"state": "ready", "restored": restored}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	got := e.get(t, apitest.BobToken, id)
	if got.Restored == nil || got.Restored.Files != 3 || got.Restored.Key != "art_snap1" || !got.Restored.Created.Equal(sealed) {
		t.Fatalf("restored: %+v", got.Restored)
	}
}

// A node that stops heartbeating for LostAfter is lost: the sweep fails what
// it ran with "node lost", releases the quota once, and the node's later
// heartbeats and claims are 410. A node that heartbeats is left alone.
func TestSweepLostNodes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tok := e.credential(t, apitest.AliceToken, "local")
	lost := e.register(t, tok, 4)
	alive := e.register(t, e.credential(t, apitest.AliceToken, "local"), 4)
	aliveTok := ""
	_ = aliveTok
	ready := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	starting := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	for i := 0; i < 2; i++ {
		if c, r := e.claim(t, tok, lost, "0s"); c == nil {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
	}
	if r := e.report(tok, lost, ready, map[string]any{"state": "ready"}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	if e.running(t, "acme", "sleeper") != 2 {
		t.Fatal("running != 2")
	}
	// 59 s without a heartbeat: nothing is due yet.
	e.Clock.Advance(59 * time.Second)
	if res, err := e.svc.SweepLostNodes(ctx, e.Clock.Now()); err != nil || res.Nodes != 0 {
		t.Fatalf("early sweep: %+v %v", res, err)
	}
	e.Clock.Advance(2 * time.Second)
	res, err := e.svc.SweepLostNodes(ctx, e.Clock.Now())
	// Both nodes registered at the same instant and neither heartbeated.
	if err != nil || res.Nodes != 2 || res.Environments != 2 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	for _, id := range []string{ready, starting} {
		got := e.get(t, apitest.BobToken, id)
		if got.State != domain.StateFailed || got.Error != "node lost" || got.StopReason != nodes.StopLost {
			t.Fatalf("%s after the sweep: %+v", id, got)
		}
	}
	if n := e.running(t, "acme", "sleeper"); n != 0 {
		t.Fatalf("running %d after the sweep", n)
	}
	if res, err := e.svc.SweepLostNodes(ctx, e.Clock.Now().Add(time.Hour)); err != nil || res.Nodes != 0 {
		t.Fatalf("second sweep: %+v %v", res, err)
	}
	if n := e.running(t, "acme", "sleeper"); n != 0 {
		t.Fatalf("running %d after a second sweep", n)
	}
	if r := e.Do("POST", "/v1/nodes/"+lost+"/heartbeat", tok, nil); r.Status != 410 {
		t.Fatalf("heartbeat of a lost node: %d %s", r.Status, r.Body)
	}
	if _, r := e.claim(t, tok, lost, "0s"); r.Status != 410 {
		t.Fatalf("claim of a lost node: %d %s", r.Status, r.Body)
	}
	if r := e.report(tok, lost, ready, map[string]any{"state": "stopped"}); r.Status != 409 {
		t.Fatalf("stopped after lost: %d %s", r.Status, r.Body)
	}
	_ = alive
}

// Heartbeats keep a node: a sweep long after registration leaves it active.
func TestHeartbeatKeepsNode(t *testing.T) {
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 1)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if c, _ := e.claim(t, tok, node, "0s"); c == nil {
		t.Fatal("no claim")
	}
	for i := 0; i < 10; i++ {
		e.Clock.Advance(30 * time.Second)
		if r := e.Do("POST", "/v1/nodes/"+node+"/heartbeat", tok, map[string]any{"environments": []string{id, "env_unknown"}}); r.Status != 200 {
			t.Fatalf("heartbeat: %d %s", r.Status, r.Body)
		}
		if res, err := e.svc.SweepLostNodes(context.Background(), e.Clock.Now()); err != nil || res.Nodes != 0 {
			t.Fatalf("sweep after a heartbeat: %+v %v", res, err)
		}
	}
	if got := e.get(t, apitest.BobToken, id); got.State != domain.StateStarting {
		t.Fatalf("environment of a live node: %s", got.State)
	}
	// Deregistering fails what it runs, once.
	r := e.Do("DELETE", "/v1/nodes/"+node, tok, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"state":"left"`) {
		t.Fatalf("deregister: %d %s", r.Status, r.Body)
	}
	if got := e.get(t, apitest.BobToken, id); got.State != domain.StateFailed || got.StopReason != nodes.StopLeft {
		t.Fatalf("after deregister: %+v", got)
	}
	if r := e.Do("DELETE", "/v1/nodes/"+node, tok, nil); r.Status != 200 {
		t.Fatalf("deregister twice: %d", r.Status)
	}
	if n := e.running(t, "acme", "sleeper"); n != 0 {
		t.Fatalf("running %d", n)
	}
	_ = fmt.Sprint
	_ = http.MethodGet
}

// A pending environment whose template was deleted before any node claimed
// it cannot run: the claim fails it with a clear error (quota released once)
// and goes on to the next one.
func TestClaimOfADeletedTemplateFailsIt(t *testing.T) {
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 4)
	gone := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	e.Clock.Advance(time.Second) // claims take the oldest first
	next := e.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if _, err := e.Store.DB().DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.Store.Table()),
		Key: map[string]types.AttributeValue{
			"PK": &types.AttributeValueMemberS{Value: "ORG#acme"}, "SK": &types.AttributeValueMemberS{Value: "TEMPLATE#sleeper"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	c, r := e.claim(t, tok, node, "0s")
	if c == nil || c.Environment.ID != next {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	got := e.get(t, apitest.BobToken, gone)
	if got.State != domain.StateFailed || got.Error != `template "sleeper" no longer exists` || got.StopReason != nodes.StopFailed {
		t.Fatalf("environment of the deleted template: %+v", got)
	}
	if n := e.running(t, "acme", "sleeper"); n != 0 {
		t.Fatalf("running %d", n)
	}
}
