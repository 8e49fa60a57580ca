package nodes_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/store"
)

// fakePoster records what is posted; connections in gone answer ErrGone,
// and drop swallows posts (a lost message). It is also the Closer: a closed
// connection is gone, as API Gateway's is after DeleteConnection.
type fakePoster struct {
	mu     sync.Mutex
	posts  []post
	gone   map[nodes.ConnectionID]bool
	drop   bool
	closed []nodes.ConnectionID
}

func (f *fakePoster) CloseConnection(_ context.Context, c nodes.ConnectionID, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, c)
	f.gone[c] = true
	return nil
}

type post struct {
	conn nodes.ConnectionID
	msg  nodes.Message
}

func (f *fakePoster) Post(_ context.Context, c nodes.ConnectionID, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[c] {
		return nodes.ErrGone
	}
	if f.drop {
		return nil
	}
	var m nodes.Message
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	f.posts = append(f.posts, post{c, m})
	return nil
}

func (f *fakePoster) taken() []post {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.posts
	f.posts = nil
	return out
}

type socketEnv struct {
	*env
	socket  *nodes.Socket
	offerer *nodes.Offerer
	stopper *nodes.Stopper
	poster  *fakePoster
	calls   *store.CallCounter
}

// newSocketEnv is the nodes and environments groups over HTTP, the node
// protocol's handler and the offerer over a store whose DynamoDB calls
// are counted, and a fake poster.
func newSocketEnv(t *testing.T) *socketEnv {
	t.Helper()
	se := &socketEnv{poster: &fakePoster{gone: map[nodes.ConnectionID]bool{}}, calls: store.NewCallCounter()}
	var svc *nodes.Service
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), se.calls.Option))
		svc = nodes.NewService(counted, stubLinks{}, e.Clock, nodes.Options{})
		se.socket = nodes.NewSocket(svc, counted, e.Log)
		se.offerer = nodes.NewOfferer(counted, se.poster, e.Clock, e.Log, 3*time.Second)
		se.stopper = nodes.NewStopper(counted, se.poster, e.Clock, e.Log, 5*time.Second)
		// Revoking a node credential ends its nodes and closes its connections
		// through the poster.
		keySvc := keys.NewService(e.Store, e.Clock, keys.WithConnectionCloser(nodes.NewRevocations(counted, se.poster, svc, e.Log)))
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, e.Clock, environments.WithOfferer(se.offerer), environments.WithStopper(se.stopper))), keys.KeyRoutes(keySvc)}
	})
	se.env = &env{Env: e, svc: svc}
	return se
}

// send handles one message on conn as the node credential token and
// decodes the answer.
func (se *socketEnv) send(t *testing.T, conn nodes.ConnectionID, token string, m nodes.Message) nodes.Message {
	t.Helper()
	p, err := apitest.NewAuth(se.Env).Authenticate(context.Background(), "Bearer "+token, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m)
	out := se.socket.Handle(context.Background(), nodes.Conn{ID: conn, Principal: p}, b)
	var r nodes.Message
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("answer %q: %v", out, err)
	}
	if r.ID != m.ID {
		t.Fatalf("answer id %q to request %q", r.ID, m.ID)
	}
	return r
}

// hello registers a node on conn.
func (se *socketEnv) hello(t *testing.T, conn nodes.ConnectionID, token string, capacity int) string {
	t.Helper()
	r := se.send(t, conn, token, nodes.Message{Type: nodes.MsgHello, ID: "1", Register: &nodes.RegisterRequest{Name: "n", Address: "127.0.0.1", Capacity: capacity}})
	if r.Type != nodes.MsgRegistered || r.Registered == nil || r.Registered.TunnelKey == "" {
		t.Fatalf("hello: %+v", r)
	}
	return r.Registered.Node.ID
}

func offered(posts []post) map[nodes.ConnectionID][]string {
	return postedOf(posts, nodes.MsgOffer)
}

// stopsOf are the environments stop messages named, per connection.
func stopsOf(posts []post) map[nodes.ConnectionID][]string {
	return postedOf(posts, nodes.MsgStop)
}

func postedOf(posts []post, typ string) map[nodes.ConnectionID][]string {
	out := map[nodes.ConnectionID][]string{}
	for _, p := range posts {
		if p.msg.Type == typ {
			out[p.conn] = append(out[p.conn], p.msg.Environments...)
		}
	}
	return out
}

// The protocol through the handler, with what each message costs: hello,
// an idle node's heartbeats (free between deadline writes), a lease that
// offers to the connected node, a claim of the offered environment,
// reports, a stop message that tells the node to stop it (a busy node's
// beats cost what an idle one's do), and disconnect.
func TestSocketProtocol(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 4)
	conns, err := se.Store.PoolConnections(ctx, "acme", "local", "", 10, se.Clock.Now())
	if err != nil || len(conns) != 1 || conns[0].ID != "c1" || conns[0].Node != node {
		t.Fatalf("connections after hello: %+v %v", conns, err)
	}

	// The first beat writes the deadline and sends the templates.
	se.calls.Reset()
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "2", Node: node})
	if r.Type != nodes.MsgBeat || r.Beat.Deadline.IsZero() || len(r.Beat.Templates) == 0 {
		t.Fatalf("first beat: %+v", r)
	}
	deadline := r.Beat.Deadline
	// The next beats of the idle node, within a minute, cost nothing.
	for i := 0; i < 5; i++ {
		se.Clock.Advance(10 * time.Second)
		se.calls.Reset()
		r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "3", Node: node, Deadline: deadline})
		if r.Type != nodes.MsgBeat || se.calls.Total() != 0 || len(r.Beat.Templates) != 0 || !r.Beat.Deadline.Equal(deadline) {
			t.Fatalf("idle beat %d: %d calls (%v), answer %+v", i, se.calls.Total(), se.calls.Counts(), r.Beat)
		}
	}
	// A minute on, the beat moves the deadline again.
	se.Clock.Advance(15 * time.Second)
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "4", Node: node, Deadline: deadline})
	if !r.Beat.Deadline.After(deadline) || len(r.Beat.Templates) == 0 {
		t.Fatalf("beat a minute on: %+v", r.Beat)
	}
	deadline = r.Beat.Deadline

	// A lease offers the environment to the node's connection.
	id := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if got := offered(se.poster.taken()); len(got["c1"]) != 1 || got["c1"][0] != id {
		t.Fatalf("offers after the lease: %v", got)
	}
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "5", Node: node, Environment: id})
	if r.Type != nodes.MsgClaimed || r.Claimed == nil || r.Claimed.Environment.ID != id || r.Claimed.Environment.State != domain.StateStarting {
		t.Fatalf("claim: %+v", r)
	}
	// Nothing else is pending: a claim answers null.
	if r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "6", Node: node}); r.Type != nodes.MsgClaimed || r.Claimed != nil {
		t.Fatalf("second claim: %+v", r)
	}
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgReport, ID: "7", Node: node, Environment: id,
		Report: &nodes.Report{State: domain.StateReady, Exports: []nodes.ExportTarget{{Service: "web", Target: "127.0.0.1:9000"}}}})
	if r.Type != nodes.MsgReported || r.Record == nil || r.Record.State != domain.StateReady {
		t.Fatalf("report ready: %+v", r)
	}
	// The re-offer job forgets the offer of a claimed environment.
	se.Clock.Advance(5 * time.Second)
	if res, err := se.offerer.Reoffer(ctx); err != nil || res.Done != 1 || res.Reoffered != 0 {
		t.Fatalf("re-offer after the claim: %+v %v", res, err)
	}

	// The node names the new environment once; it runs one, so the beat
	// reads what the node runs.
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "8", Node: node, Changed: []string{id}, Running: 1, Deadline: deadline})
	if len(r.Beat.Environments) != 1 || r.Beat.Environments[0].State != domain.StateReady {
		t.Fatalf("beat naming the environment: %+v", r.Beat)
	}
	// Beats of a node that runs one and changed nothing cost nothing.
	se.calls.Reset()
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "8b", Node: node, Running: 1, Deadline: deadline})
	if len(r.Beat.Environments) != 0 || se.calls.Total() != 0 {
		t.Fatalf("busy beat with no change: %+v, %d calls (%v)", r.Beat, se.calls.Total(), se.calls.Counts())
	}
	// A delete tells the node over its connection, one stop message.
	se.poster.taken()
	if d := se.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); d.Status != 200 {
		t.Fatalf("delete: %d %s", d.Status, d.Body)
	}
	if got := stopsOf(se.poster.taken()); len(got) != 1 || len(got["c1"]) != 1 || got["c1"][0] != id {
		t.Fatalf("stop messages after the delete: %v", got)
	}
	// The first beat of a connection (no deadline known) still reads all
	// the node is assigned, stops missed while it had none included.
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "9", Node: node, Running: 1})
	if len(r.Beat.Environments) != 1 || r.Beat.Environments[0].State != domain.StateStopping {
		t.Fatalf("first beat of a connection after the delete: %+v", r.Beat)
	}
	deadline = r.Beat.Deadline
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgReport, ID: "10", Node: node, Environment: id, Report: &nodes.Report{State: domain.StateStopped}})
	if r.Record == nil || r.Record.State != domain.StateStopped {
		t.Fatalf("report stopped: %+v", r)
	}

	if err := se.socket.Disconnect(ctx, nodes.Conn{ID: "c1", Principal: domain.Principal{OrgID: "acme", Pool: "local"}}); err != nil {
		t.Fatal(err)
	}
	if conns, _ := se.Store.PoolConnections(ctx, "acme", "local", "", 10, se.Clock.Now()); len(conns) != 0 {
		t.Fatalf("connections after disconnect: %+v", conns)
	}
}

// A request that fails is answered with the status and code of the HTTP
// endpoint; resuming a node on a new connection records that connection.
func TestSocketErrorsAndResume(t *testing.T) {
	se := newSocketEnv(t)
	tok := se.credential(t, apitest.AliceToken, "local")
	other := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 2)
	for _, tc := range []struct {
		name   string
		token  string
		m      nodes.Message
		status int
	}{
		{"unknown type", tok, nodes.Message{Type: "dance", ID: "a"}, 400},
		{"another credential's node", other, nodes.Message{Type: nodes.MsgHeartbeat, ID: "b", Node: node}, 404},
		{"no such node", tok, nodes.Message{Type: nodes.MsgClaim, ID: "c", Node: "node_nope"}, 404},
		{"report without report", tok, nodes.Message{Type: nodes.MsgReport, ID: "d", Node: node, Environment: "env_x"}, 422},
		{"resume of another credential's node", other, nodes.Message{Type: nodes.MsgHello, ID: "e", Node: node}, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := se.send(t, "c9", tc.token, tc.m)
			if r.Type != nodes.MsgError || r.Error == nil || r.Error.Status != tc.status || r.Error.Message == "" {
				t.Fatalf("answer %+v, want error %d", r, tc.status)
			}
		})
	}
	r := se.send(t, "c2", tok, nodes.Message{Type: nodes.MsgHello, ID: "f", Node: node})
	if r.Type != nodes.MsgRegistered || r.Registered.Node.ID != node || r.Registered.TunnelKey != "" {
		t.Fatalf("resume: %+v", r)
	}
	conns, _ := se.Store.PoolConnections(context.Background(), "acme", "local", "", 10, se.Clock.Now())
	if len(conns) != 2 {
		t.Fatalf("connections after resume: %+v", conns)
	}
}

// An offer that is lost (the poster swallowed it) is sent again by the
// re-offer job once it is due, with backoff, until the environment is
// claimed; a gone connection is forgotten and another one woken.
func TestReofferAndGoneConnections(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 2)
	se.poster.drop = true
	id := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	se.poster.drop = false
	if res, err := se.offerer.Reoffer(ctx); err != nil || res.Offers != 1 || res.Reoffered != 0 {
		t.Fatalf("re-offer before due: %+v %v", res, err)
	}
	se.Clock.Advance(3 * time.Second)
	if res, err := se.offerer.Reoffer(ctx); err != nil || res.Reoffered != 1 {
		t.Fatalf("re-offer when due: %+v %v", res, err)
	}
	if got := offered(se.poster.taken()); len(got["c1"]) != 1 || got["c1"][0] != id {
		t.Fatalf("re-offered: %v", got)
	}
	// The next re-offer waits twice as long.
	se.Clock.Advance(3 * time.Second)
	if res, _ := se.offerer.Reoffer(ctx); res.Reoffered != 0 {
		t.Fatalf("re-offer before the backoff: %+v", res)
	}
	se.Clock.Advance(3 * time.Second)
	if res, _ := se.offerer.Reoffer(ctx); res.Reoffered != 1 {
		t.Fatalf("re-offer after the backoff: %+v", res)
	}
	se.poster.taken()

	// c1 is gone: the wake goes to c2 and c1 is forgotten.
	se.hello(t, "c2", tok, 2)
	se.poster.gone["c1"] = true
	id2 := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if got := offered(se.poster.taken()); len(got["c2"]) != 1 || got["c2"][0] != id2 {
		t.Fatalf("offers with c1 gone: %v", got)
	}
	conns, _ := se.Store.PoolConnections(ctx, "acme", "local", "", 10, se.Clock.Now())
	if len(conns) != 1 || conns[0].ID != "c2" {
		t.Fatalf("connections: %+v", conns)
	}
	r := se.send(t, "c2", tok, nodes.Message{Type: nodes.MsgClaim, ID: "x", Node: node, Environment: id})
	if r.Claimed == nil || r.Claimed.Environment.ID != id {
		t.Fatalf("claim: %+v", r)
	}
}

// Of nodes that claim the same offered environment at once, exactly one
// gets it.
func TestSocketClaimIsExact(t *testing.T) {
	se := newSocketEnv(t)
	tok := se.credential(t, apitest.AliceToken, "local")
	const n = 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = se.hello(t, nodes.ConnectionID("c"+string(rune('a'+i))), tok, 1)
	}
	id := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	var wg sync.WaitGroup
	got := make([]nodes.Message, n)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = se.send(t, nodes.ConnectionID("c"+string(rune('a'+i))), tok, nodes.Message{Type: nodes.MsgClaim, ID: "x", Node: ids[i], Environment: id})
		}()
	}
	wg.Wait()
	winners := 0
	for _, r := range got {
		if r.Type == nodes.MsgError {
			t.Fatalf("claim failed: %+v", r.Error)
		}
		if r.Claimed != nil {
			winners++
			if r.Claimed.Environment.ID != id {
				t.Fatalf("claimed %s", r.Claimed.Environment.ID)
			}
		}
	}
	if winners != 1 {
		t.Fatalf("%d nodes claimed the environment, want 1", winners)
	}
}

// A node's deadline never moves earlier: an HTTP heartbeat (LostAfter ahead)
// after a socket beat (DeadlineEvery + LostAfter ahead) keeps the later one,
// because the lost-node sweep may have moved the node's due entry to it and
// would otherwise find the node late.
func TestHeartbeatNeverPullsTheDeadlineIn(t *testing.T) {
	se := newSocketEnv(t)
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 1)
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "2", Node: node})
	if r.Type != nodes.MsgBeat || r.Beat == nil || r.Beat.Deadline.IsZero() {
		t.Fatalf("socket beat: %+v", r)
	}
	later := r.Beat.Deadline
	se.Clock.Advance(5 * time.Second)
	if hr := se.Do("POST", "/v1/nodes/"+node+"/heartbeat", tok, map[string]any{"environments": []string{}}); hr.Status != 200 {
		t.Fatalf("HTTP heartbeat: %d %s", hr.Status, hr.Body)
	}
	n, err := se.Store.GetNode(context.Background(), "acme", node)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Deadline.Equal(later) {
		t.Fatalf("deadline %s after the HTTP heartbeat, want the socket beat's %s", n.Deadline, later)
	}
	if n.State != domain.NodeActive {
		t.Fatalf("state %s", n.State)
	}
}

// A connection keeps the principal it opened with; revoking its node
// credential still stops the node at once: its claims and its next
// deadline-writing beat check the credential in their own transaction.
func TestRevokedCredentialOnAnOpenConnection(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	p, err := apitest.NewAuth(se.Env).Authenticate(ctx, "Bearer "+tok, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn := nodes.Conn{ID: "c1", Principal: p}
	send := func(m nodes.Message) nodes.Message {
		t.Helper()
		b, _ := json.Marshal(m)
		var r nodes.Message
		if err := json.Unmarshal(se.socket.Handle(ctx, conn, b), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := send(nodes.Message{Type: nodes.MsgHello, ID: "1", Register: &nodes.RegisterRequest{Name: "n", Address: "127.0.0.1", Capacity: 2}})
	if r.Registered == nil {
		t.Fatalf("hello: %+v", r)
	}
	node := r.Registered.Node.ID
	if r = send(nodes.Message{Type: nodes.MsgHeartbeat, ID: "2", Node: node}); r.Type != nodes.MsgBeat {
		t.Fatalf("beat before the revoke: %+v", r)
	}
	deadline := r.Beat.Deadline

	k, err := se.Store.GetKey(ctx, "acme", p.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := se.Store.RevokeKey(ctx, k, se.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	id := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	r = send(nodes.Message{Type: nodes.MsgClaim, ID: "3", Node: node, Environment: id})
	if r.Type != nodes.MsgError || r.Error == nil || r.Error.Status != 401 {
		t.Fatalf("claim with a revoked credential: %+v", r)
	}
	if got := se.get(t, apitest.BobToken, id); got.State != domain.StatePending {
		t.Fatalf("environment after the refused claim: %s", got.State)
	}
	// Beats that write nothing disclose nothing and cost nothing; the next
	// one that moves the deadline is refused.
	se.Clock.Advance(time.Minute + time.Second)
	r = send(nodes.Message{Type: nodes.MsgHeartbeat, ID: "4", Node: node, Deadline: deadline})
	if r.Type != nodes.MsgError || r.Error == nil || r.Error.Status != 401 {
		t.Fatalf("deadline beat with a revoked credential: %+v", r)
	}
}

// A claim with only takes the named environment or nothing: a node short of
// disk that claims an environment to refuse it must never be handed another
// pending one in its place (it would fail that one instead).
func TestClaimOnlyTheNamedEnvironment(t *testing.T) {
	se := newSocketEnv(t)
	tok := se.credential(t, apitest.AliceToken, "local")
	short := se.hello(t, "c1", tok, 4)
	other := se.hello(t, "c2", tok, 4)
	offeredEnv := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	waiting := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})

	// Another node took the offered environment meanwhile.
	if r := se.send(t, "c2", tok, nodes.Message{Type: nodes.MsgClaim, ID: "1", Node: other, Environment: offeredEnv, Only: true}); r.Claimed == nil || r.Claimed.Environment.ID != offeredEnv {
		t.Fatalf("claim by the other node: %+v", r)
	}
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "2", Node: short, Environment: offeredEnv, Only: true})
	if r.Type != nodes.MsgClaimed || r.Claimed != nil {
		t.Fatalf("claim only of an environment another node has: %+v (want nothing, %s still pending)", r, waiting)
	}
	e, err := se.Store.GetEnvironment(context.Background(), "acme", waiting)
	if err != nil || e.State != domain.StatePending || e.Node != "" {
		t.Fatalf("the other pending environment: %+v %v", e, err)
	}
	// Without only, the same claim falls back to what is pending.
	if r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "3", Node: short, Environment: offeredEnv}); r.Claimed == nil || r.Claimed.Environment.ID != waiting {
		t.Fatalf("claim without only: %+v", r)
	}
}
