package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// Revoking a node credential (DELETE /v1/keys/{id}) ends everything it
// holds: its nodes are ended, the connections it opened are closed and
// forgotten (another credential's are not), and every message a connection of it still sends
// is refused with 401 and ends that connection, creating nothing, changing
// no environment and recording no event; no offer reaches it, and its HTTP
// requests are refused too.
func TestRevokedCredentialCanDoNothing(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	p, err := apitest.NewAuth(se.Env).Authenticate(ctx, "Bearer "+tok, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	other := se.credential(t, apitest.AliceToken, "local")

	// The revoked credential's node runs A (starting) on c1 and is resumed
	// on c2 too; B waits pending; another credential's node holds c3.
	node := se.hello(t, "c1", tok, 4)
	if r := se.send(t, "c2", tok, nodes.Message{Type: nodes.MsgHello, ID: "1", Node: node}); r.Type != nodes.MsgRegistered {
		t.Fatalf("resume on c2: %+v", r)
	}
	se.hello(t, "c3", other, 4)
	beat := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "2", Node: node})
	if beat.Type != nodes.MsgBeat {
		t.Fatalf("beat: %+v", beat)
	}
	envA := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "3", Node: node, Environment: envA}); r.Claimed == nil {
		t.Fatalf("claim A: %+v", r)
	}
	// A pending lease offers to a connection; the node does not claim it.
	se.poster.mu.Lock()
	se.poster.drop = true
	se.poster.mu.Unlock()
	envB := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	se.poster.mu.Lock()
	se.poster.drop = false
	se.poster.mu.Unlock()
	se.poster.taken()

	var keyID struct {
		Keys []struct {
			ID     string `json:"id"`
			Prefix string `json:"prefix"`
		} `json:"keys"`
	}
	se.Do("GET", "/v1/keys", apitest.AliceToken, nil).JSON(t, &keyID)
	if i := slices.IndexFunc(keyID.Keys, func(k struct {
		ID     string `json:"id"`
		Prefix string `json:"prefix"`
	}) bool {
		return k.ID == p.KeyID
	}); i < 0 {
		t.Fatalf("key %s not listed", p.KeyID)
	}
	nodesBefore, _ := se.Store.ListNodes(ctx, "acme")
	se.Clock.Advance(time.Second) // what follows is told apart by its time
	if r := se.Do("DELETE", "/v1/keys/"+p.KeyID, apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	revokedAt := se.Clock.Now()

	// Its two connections are closed and forgotten; the other credential's
	// stays.
	se.poster.mu.Lock()
	closed := slices.Clone(se.poster.closed)
	se.poster.mu.Unlock()
	slices.Sort(closed)
	if !slices.Equal(closed, []nodes.ConnectionID{"c1", "c2"}) {
		t.Fatalf("closed %v, want c1 and c2", closed)
	}
	if conns, _ := se.Store.PoolConnections(ctx, "acme", "local", "", 10, se.Clock.Now()); len(conns) != 1 || conns[0].ID != "c3" {
		t.Fatalf("connections after the revoke: %+v", conns)
	}

	// Every message a connection of it still sends (had the close not
	// reached it yet) is refused, and the refusal ends the connection.
	for _, tc := range []struct {
		name string
		m    nodes.Message
	}{
		{"hello that registers", nodes.Message{Type: nodes.MsgHello, Register: &nodes.RegisterRequest{Name: "n", Address: "127.0.0.1", Capacity: 2}}},
		{"hello that resumes", nodes.Message{Type: nodes.MsgHello, Node: node}},
		{"heartbeat that writes the deadline", nodes.Message{Type: nodes.MsgHeartbeat, Node: node}},
		{"heartbeat naming environments", nodes.Message{Type: nodes.MsgHeartbeat, Node: node, Changed: []string{envA, envB}, Deadline: beat.Beat.Deadline}},
		{"first heartbeat of a connection of a node that runs some", nodes.Message{Type: nodes.MsgHeartbeat, Node: node, Running: 1}},
		{"claim of the offered environment", nodes.Message{Type: nodes.MsgClaim, Node: node, Environment: envB}},
		{"claim of anything", nodes.Message{Type: nodes.MsgClaim, Node: node}},
		{"report ready", nodes.Message{Type: nodes.MsgReport, Node: node, Environment: envA,
			Report: &nodes.Report{State: domain.StateReady, Exports: []nodes.ExportTarget{{Service: "web", Target: "127.0.0.1:9000"}}}}},
		{"report failed", nodes.Message{Type: nodes.MsgReport, Node: node, Environment: envA, Report: &nodes.Report{State: domain.StateFailed, Error: "planted text"}}},
		{"report stopped", nodes.Message{Type: nodes.MsgReport, Node: node, Environment: envA, Report: &nodes.Report{State: domain.StateStopped}}},
		{"report starting", nodes.Message{Type: nodes.MsgReport, Node: node, Environment: envA, Report: &nodes.Report{State: domain.StateStarting}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.ID = "r"
			b, _ := json.Marshal(tc.m)
			out, end := se.socket.Answer(ctx, nodes.Conn{ID: "c1", Principal: p}, b)
			var r nodes.Message
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("answer %q: %v", out, err)
			}
			if r.Type != nodes.MsgError || r.Error == nil || r.Error.Status != 401 || r.Error.Message != "the node credential has been revoked" || r.ID != "r" {
				t.Fatalf("answer %+v, want 401: the node credential has been revoked", r)
			}
			if !end {
				t.Fatal("the refusal does not end the connection")
			}
		})
	}
	// A beat between deadline writes reads and writes nothing (it costs
	// nothing, for every node): it is not refused, and it tells nothing the
	// node did not send, nor changes anything.
	// That holds for a node that runs environments as for an idle one:
	// stops reach it as stop messages.
	for _, running := range []int{0, 1} {
		se.calls.Reset()
		b, _ := json.Marshal(nodes.Message{Type: nodes.MsgHeartbeat, ID: "q", Node: node, Running: running, Deadline: beat.Beat.Deadline})
		out, end := se.socket.Answer(ctx, nodes.Conn{ID: "c1", Principal: p}, b)
		var quiet nodes.Message
		_ = json.Unmarshal(out, &quiet)
		if end || quiet.Beat == nil || len(quiet.Beat.Environments) != 0 || quiet.Beat.Templates != nil || !quiet.Beat.Deadline.Equal(beat.Beat.Deadline) || se.calls.Total() != 0 {
			t.Fatalf("quiet beat running %d: %s (%d calls)", running, out, se.calls.Total())
		}
	}

	// Nothing was created or changed, nothing recorded for it.
	if nodesAfter, _ := se.Store.ListNodes(ctx, "acme"); len(nodesAfter) != len(nodesBefore) {
		t.Fatalf("%d nodes after the refused messages, %d before", len(nodesAfter), len(nodesBefore))
	}
	if conns, _ := se.Store.PoolConnections(ctx, "acme", "local", "", 10, se.Clock.Now()); len(conns) != 1 || conns[0].ID != "c3" {
		t.Fatalf("connections after the refused messages: %+v", conns)
	}
	if n, _ := se.Store.GetNode(ctx, "acme", node); !n.Deadline.Equal(beat.Beat.Deadline) {
		t.Fatalf("node deadline moved to %s", n.Deadline)
	}
	// The revocation failed A (its node ended); the refused reports
	// changed nothing of that.
	if a := se.get(t, apitest.BobToken, envA); a.State != domain.StateFailed || a.Error != nodes.ErrorNodeRevoked || a.StopReason != nodes.StopRevoked {
		t.Fatalf("A after the refused reports: %s %q %q", a.State, a.Error, a.StopReason)
	}
	if b := se.get(t, apitest.BobToken, envB); b.State != domain.StatePending {
		t.Fatalf("B after the refused claims: %s", b.State)
	}
	page, err := se.Store.ListEvents(ctx, "acme", domain.EventQuery{Since: revokedAt, Limit: 100}, se.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		if ev.Actor.ID == p.KeyID && !ev.Time.Before(revokedAt) {
			t.Fatalf("event recorded for the revoked credential: %+v", ev)
		}
	}

	// Its HTTP requests are refused at authentication.
	for _, r := range []struct{ method, path string }{
		{"POST", "/v1/nodes"},
		{"POST", "/v1/nodes/" + node + "/heartbeat"},
		{"POST", "/v1/nodes/" + node + "/claim?wait=0s"},
		{"POST", "/v1/nodes/" + node + "/environments/" + envA + "/report"},
		{"DELETE", "/v1/nodes/" + node},
	} {
		body := map[string]any{"name": "n", "address": "127.0.0.1", "capacity": 1, "state": "failed", "error": "x"}
		if r.method == "DELETE" {
			body = nil
		}
		if res := se.Do(r.method, r.path, tok, body); res.Status != 401 {
			t.Errorf("%s %s with the revoked credential: %d %s", r.method, r.path, res.Status, res.Body)
		}
	}

	// No offer reaches its connections: a lease and the re-offer job wake
	// the other credential's connection only.
	if d := se.Do("DELETE", "/v1/environments/"+envA, apitest.BobToken, nil); d.Status != 200 {
		t.Fatalf("delete A: %d %s", d.Status, d.Body)
	}
	envC := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	se.Clock.Advance(time.Minute)
	if _, err := se.offerer.Reoffer(ctx); err != nil {
		t.Fatal(err)
	}
	got := offered(se.poster.taken())
	if len(got["c1"]) > 0 || len(got["c2"]) > 0 || !slices.Contains(got["c3"], envC) || !slices.Contains(got["c3"], envB) {
		t.Fatalf("offers after the revoke: %v", got)
	}
}

// A connection recorded while a revocation commits is either refused (the
// revocation committed first) or found and closed by it: the record is
// written only in a transaction that checks the key unrevoked, and the
// revocation reads the pool's records strongly consistent after it.
func TestConnectionRecordChecksTheCredential(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	p, err := apitest.NewAuth(se.Env).Authenticate(ctx, "Bearer "+tok, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	k, err := se.Store.GetKey(ctx, "acme", p.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	c := domain.NodeConnection{ID: "c1", OrgID: "acme", Pool: "local", Node: "node_x", KeyID: p.KeyID, Connected: se.Clock.Now()}
	if err := se.Store.PutConnection(ctx, c, p.KeyHash); err != nil {
		t.Fatal(err)
	}
	if got, err := se.Store.KeyConnections(ctx, "acme", "local", p.KeyID); err != nil || len(got) != 1 || got[0].ID != "c1" || got[0].KeyID != p.KeyID {
		t.Fatalf("key connections: %+v %v", got, err)
	}
	// A record from before connections named their key is found through
	// its node; another credential's node's is not.
	mine := se.hello(t, "c8", tok, 1)
	theirs := se.hello(t, "c9", se.credential(t, apitest.AliceToken, "local"), 1)
	for id, n := range map[string]string{"c8": mine, "c9": theirs} {
		if err := se.Store.PutConnection(ctx, domain.NodeConnection{ID: id, OrgID: "acme", Pool: "local", Node: n, Connected: se.Clock.Now()}, ""); err != nil {
			t.Fatal(err)
		}
	}
	got, err := se.Store.KeyConnections(ctx, "acme", "local", p.KeyID)
	ids := []string{}
	for _, c := range got {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"c1", "c8"}) {
		t.Fatalf("key connections with an unnamed record: %v %v", ids, err)
	}
	if err := se.Store.DeleteConnection(ctx, "acme", "local", "c8"); err != nil {
		t.Fatal(err)
	}
	if _, err := se.Store.RevokeKey(ctx, k, se.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	c.ID = "c2"
	if err := se.Store.PutConnection(ctx, c, p.KeyHash); domain.ErrorCode(err) != domain.CodeUnauthorized {
		t.Fatalf("a connection recorded after the revoke: %v", err)
	}
	if got, _ := se.Store.KeyConnections(ctx, "acme", "local", p.KeyID); len(got) != 1 || got[0].ID != "c1" {
		t.Fatalf("key connections after the revoke: %+v", got)
	}
	if err := se.Store.PutNode(ctx, domain.Node{ID: "node_y", OrgID: "acme", Pool: "local", KeyID: p.KeyID, State: domain.NodeActive,
		Registered: se.Clock.Now(), LastHeartbeat: se.Clock.Now(), Deadline: se.Clock.Now().Add(time.Minute), Version: 1}, p.KeyHash); domain.ErrorCode(err) != domain.CodeUnauthorized {
		t.Fatalf("a node registered after the revoke: %v", err)
	}
	if _, err := se.Store.GetNode(ctx, "acme", "node_y"); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Fatalf("node_y: %v", err)
	}
}

// failingCloser refuses every close, as a Management API that is down.
type failingCloser struct{ tried []nodes.ConnectionID }

func (f *failingCloser) CloseConnection(_ context.Context, c nodes.ConnectionID, _ string) error {
	f.tried = append(f.tried, c)
	return errors.New("the management API is down")
}

// A close that fails does not fail the revocation: the key is revoked, the
// connection's record is forgotten all the same (no offer reaches it), and
// its next message that reads or writes is refused and ends it.
func TestRevocationWhoseCloseFails(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	p, err := apitest.NewAuth(se.Env).Authenticate(ctx, "Bearer "+tok, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	node := se.hello(t, "c1", tok, 1)
	k, err := se.Store.GetKey(ctx, "acme", p.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if k, err = se.Store.RevokeKey(ctx, k, se.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	closer := &failingCloser{}
	if err := nodes.NewRevocations(se.Store, closer, se.svc, se.Log).CloseConnections(ctx, k); err != nil {
		t.Fatalf("revocation with a failing close: %v", err)
	}
	if len(closer.tried) != 1 || closer.tried[0] != "c1" {
		t.Fatalf("closes tried: %v", closer.tried)
	}
	if conns, _ := se.Store.PoolConnections(ctx, "acme", "local", "", 10, se.Clock.Now()); len(conns) != 0 {
		t.Fatalf("connections after the revoke: %+v", conns)
	}
	se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if got := offered(se.poster.taken()); len(got) != 0 {
		t.Fatalf("offers after the revoke: %v", got)
	}
	b, _ := json.Marshal(nodes.Message{Type: nodes.MsgHeartbeat, ID: "x", Node: node})
	if out, end := se.socket.Answer(ctx, nodes.Conn{ID: "c1", Principal: p}, b); !end || !strings.Contains(string(out), `"status":401`) {
		t.Fatalf("beat after the failed close: %s (end %v)", out, end)
	}
}

// Revoking a node credential ends its nodes at once, as a lost node is
// ended: each is marked lost, what it ran (ready or starting) fails with
// "the node's credential was revoked" and stopReason lost, the quota is
// released once, and no tunnel ticket names it any more. Another
// credential's node and what it runs are left alone. Revoking again changes
// nothing.
func TestRevocationEndsTheCredentialsNodes(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	p, err := apitest.NewAuth(se.Env).Authenticate(ctx, "Bearer "+tok, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	other := se.credential(t, apitest.AliceToken, "local")
	exports := map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:8080"}}}

	// The revoked credential runs A (ready, over HTTP, tunnels) and B
	// (starting, on the node protocol); the other credential runs C.
	httpNode := se.registerTunnels(t, tok, tunnelURL).Node.ID
	envA := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if c, r := se.claim(t, tok, httpNode, "1s"); c == nil || c.Environment.ID != envA {
		t.Fatalf("claim A: %d %s", r.Status, r.Body)
	}
	if r := se.report(tok, httpNode, envA, exports); r.Status != 200 {
		t.Fatalf("A ready: %d %s", r.Status, r.Body)
	}
	sockNode := se.hello(t, "c1", tok, 2)
	envB := se.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "b", Node: sockNode, Environment: envB}); r.Claimed == nil {
		t.Fatalf("claim B: %+v", r)
	}
	otherNode := se.registerTunnels(t, other, tunnelURL).Node.ID
	envC := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if c, r := se.claim(t, other, otherNode, "1s"); c == nil || c.Environment.ID != envC {
		t.Fatalf("claim C: %d %s", r.Status, r.Body)
	}
	if r := se.report(other, otherNode, envC, exports); r.Status != 200 {
		t.Fatalf("C ready: %d %s", r.Status, r.Body)
	}
	tunnel := func(id string) *apitest.Response {
		return se.Do("POST", "/v1/environments/"+id+"/tunnel", apitest.BobToken, nil)
	}
	if r := tunnel(envA); r.Status != 200 {
		t.Fatalf("tunnel to A before the revoke: %d %s", r.Status, r.Body)
	}
	if n, m := se.running(t, "acme", "shell"), se.running(t, "acme", "sleeper"); n != 2 || m != 1 {
		t.Fatalf("running %d shell and %d sleeper before the revoke, want 2 and 1", n, m)
	}

	se.Clock.Advance(time.Second)
	if r := se.Do("DELETE", "/v1/keys/"+p.KeyID, apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	revokedAt := se.Clock.Now()
	check := func(when string) {
		t.Helper()
		for _, id := range []string{envA, envB} {
			e := se.get(t, apitest.BobToken, id)
			if e.State != domain.StateFailed || e.Error != nodes.ErrorNodeRevoked || e.StopReason != nodes.StopRevoked || e.Stopped == nil || !e.Stopped.Equal(revokedAt) {
				t.Fatalf("%s %s: %s %q %q stopped %v", when, id, e.State, e.Error, e.StopReason, e.Stopped)
			}
		}
		if e := se.get(t, apitest.BobToken, envC); e.State != domain.StateReady {
			t.Fatalf("%s, the other credential's C: %s %q", when, e.State, e.Error)
		}
		for id, want := range map[string]string{httpNode: domain.NodeLost, sockNode: domain.NodeLost, otherNode: domain.NodeActive} {
			if n, err := se.Store.GetNode(ctx, "acme", id); err != nil || n.State != want {
				t.Fatalf("%s, node %s: %s %v, want %s", when, id, n.State, err, want)
			}
		}
		if n, m := se.running(t, "acme", "shell"), se.running(t, "acme", "sleeper"); n != 1 || m != 0 {
			t.Fatalf("%s, running %d shell and %d sleeper, want 1 and 0 (the quota released once)", when, n, m)
		}
		if r := tunnel(envA); r.Status != 409 || !strings.Contains(r.Map(t)["error"].(string), "it no longer runs") {
			t.Fatalf("%s, tunnel to A: %d %s, want 409", when, r.Status, r.Body)
		}
		if r := tunnel(envC); r.Status != 200 {
			t.Fatalf("%s, tunnel to C: %d %s", when, r.Status, r.Body)
		}
	}
	check("after the revoke")
	events := func() map[string]int {
		page, err := se.Store.ListEvents(ctx, "acme", domain.EventQuery{Since: revokedAt, Limit: 100}, se.Clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, ev := range page.Events {
			out[ev.Type]++
		}
		return out
	}
	before := events()
	if before[domain.EventNodeLost] != 2 {
		t.Fatalf("events after the revoke: %v, want two %s", before, domain.EventNodeLost)
	}

	se.Clock.Advance(time.Second)
	if r := se.Do("DELETE", "/v1/keys/"+p.KeyID, apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("revoke again: %d %s", r.Status, r.Body)
	}
	check("after revoking again")
	if after := events(); !maps.Equal(after, before) {
		t.Fatalf("events after revoking again: %v, before %v", after, before)
	}
}
