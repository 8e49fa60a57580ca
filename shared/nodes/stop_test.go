package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/timeouts"
)

// runningOn leases an environment, has the node on conn claim it and report
// it ready, and returns its id.
func (se *socketEnv) runningOn(t *testing.T, conn nodes.ConnectionID, tok, node string) string {
	t.Helper()
	id := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	r := se.send(t, conn, tok, nodes.Message{Type: nodes.MsgClaim, ID: "c", Node: node, Environment: id})
	if r.Claimed == nil || r.Claimed.Environment.ID != id {
		t.Fatalf("claim: %+v", r)
	}
	r = se.send(t, conn, tok, nodes.Message{Type: nodes.MsgReport, ID: "r", Node: node, Environment: id,
		Report: &nodes.Report{State: domain.StateReady, Exports: []nodes.ExportTarget{{Service: "web", Target: "127.0.0.1:9000"}}}})
	if r.Record == nil || r.Record.State != domain.StateReady {
		t.Fatalf("report ready: %+v", r)
	}
	return id
}

func (se *socketEnv) del(t *testing.T, id string) {
	t.Helper()
	if d := se.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); d.Status != 200 {
		t.Fatalf("delete: %d %s", d.Status, d.Body)
	}
}

// A delete tells the node at once, for one read and one post; a stop
// message that is lost is sent again by the stop job until the node has
// reported the environment stopped, and then forgotten.
func TestStopIsPushedAndResent(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 4)
	id := se.runningOn(t, "c1", tok, node)
	se.poster.taken()

	// Lost: the post is swallowed.
	se.poster.drop = true
	se.del(t, id)
	se.poster.drop = false
	if e := se.get(t, apitest.BobToken, id); e.State != domain.StateStopping {
		t.Fatalf("after the delete: %s", e.State)
	}
	// Not due yet: nothing is sent again.
	if res, err := se.stopper.Resend(ctx); err != nil || res.Notices != 1 || res.Resent != 0 {
		t.Fatalf("stop job before the notice is due: %+v %v", res, err)
	}
	se.Clock.Advance(30 * time.Second)
	se.calls.Reset()
	res, err := se.stopper.Resend(ctx)
	if err != nil || res.Resent != 1 || res.Done != 0 {
		t.Fatalf("stop job: %+v %v", res, err)
	}
	if got := stopsOf(se.poster.taken()); len(got["c1"]) != 1 || got["c1"][0] != id {
		t.Fatalf("stop messages of the job: %v", got)
	}
	// What the pass cost: a query per shard, the environments of the
	// organization (one batch read), the node's connection, the notice
	// moved.
	if want := domain.StopShards + 3; se.calls.Total() != want {
		t.Fatalf("stop job pass: %d calls (%v), want %d", se.calls.Total(), se.calls.Counts(), want)
	}
	// The node reports it stopped: the next pass due forgets the notice.
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgReport, ID: "s", Node: node, Environment: id, Report: &nodes.Report{State: domain.StateStopped}})
	if r.Record == nil || r.Record.State != domain.StateStopped {
		t.Fatalf("report stopped: %+v", r)
	}
	se.Clock.Advance(10 * time.Second)
	if res, err := se.stopper.Resend(ctx); err != nil || res.Done != 1 || res.Resent != 0 {
		t.Fatalf("stop job after the report: %+v %v", res, err)
	}
	if res, err := se.stopper.Resend(ctx); err != nil || res.Notices != 0 {
		t.Fatalf("stop job with nothing stopping: %+v %v", res, err)
	}
	if got := stopsOf(se.poster.taken()); len(got) != 0 {
		t.Fatalf("stop messages once stopped: %v", got)
	}
}

// Every path that leaves an environment stopping on a node tells that node:
// a delete and the timeout job at once, with one message each; stops that
// take it straight to stopped or failed (pending, or its node lost) tell
// no node.
func TestEveryStopOfARunningEnvironmentIsTold(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, se *socketEnv, id string)
	}{
		{"delete", func(t *testing.T, se *socketEnv, id string) { se.del(t, id) }},
		{"timeout job", func(t *testing.T, se *socketEnv, id string) {
			se.Clock.Advance(2 * time.Hour)
			sum, err := timeouts.Run(context.Background(), se.Store, se.Clock, timeouts.Options{Stopper: se.stopper})
			if err != nil || sum.Stopped != 1 {
				t.Fatalf("timeout run: %+v %v", sum, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := newSocketEnv(t)
			tok := se.credential(t, apitest.AliceToken, "local")
			node := se.hello(t, "c1", tok, 4)
			id := se.runningOn(t, "c1", tok, node)
			se.poster.taken()
			tc.stop(t, se, id)
			if e := se.get(t, apitest.BobToken, id); e.State != domain.StateStopping {
				t.Fatalf("after the stop: %s", e.State)
			}
			posts := se.poster.taken()
			if got := stopsOf(posts); len(posts) != 1 || len(got["c1"]) != 1 || got["c1"][0] != id {
				t.Fatalf("posts after the stop: %+v", posts)
			}
		})
	}
	t.Run("pending", func(t *testing.T) {
		se := newSocketEnv(t)
		tok := se.credential(t, apitest.AliceToken, "local")
		se.hello(t, "c1", tok, 4)
		id := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
		se.poster.taken()
		se.del(t, id)
		if got := stopsOf(se.poster.taken()); len(got) != 0 {
			t.Fatalf("stop messages for a pending environment: %v", got)
		}
		if res, err := se.stopper.Resend(context.Background()); err != nil || res.Notices != 0 {
			t.Fatalf("stop notices for a pending environment: %+v %v", res, err)
		}
	})
}

// A node whose connection ended ($disconnect) is not posted to; its stop
// waits, and reaches it on the connection it opens next (the stop job, or
// the first beat there, which reads all it is assigned). A connection that
// is gone without a $disconnect is forgotten at the first post.
func TestStopWaitsForTheNodesNextConnection(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 4)
	id := se.runningOn(t, "c1", tok, node)
	if err := se.socket.Disconnect(ctx, nodes.Conn{ID: "c1", Principal: domain.Principal{OrgID: "acme", Pool: "local"}}); err != nil {
		t.Fatal(err)
	}
	se.poster.taken()
	se.del(t, id)
	if posts := se.poster.taken(); len(posts) != 0 {
		t.Fatalf("posts to a node without a connection: %+v", posts)
	}
	se.Clock.Advance(30 * time.Second)
	if res, err := se.stopper.Resend(ctx); err != nil || res.Resent != 1 {
		t.Fatalf("stop job: %+v %v", res, err)
	}
	if posts := se.poster.taken(); len(posts) != 0 {
		t.Fatalf("posts of the job to a node without a connection: %+v", posts)
	}
	// The node comes back on c2: the next pass due reaches it there.
	if r := se.send(t, "c2", tok, nodes.Message{Type: nodes.MsgHello, ID: "h", Node: node}); r.Type != nodes.MsgRegistered {
		t.Fatalf("resume: %+v", r)
	}
	se.Clock.Advance(10 * time.Second)
	if res, err := se.stopper.Resend(ctx); err != nil || res.Resent != 1 {
		t.Fatalf("stop job after the resume: %+v %v", res, err)
	}
	if got := stopsOf(se.poster.taken()); len(got["c2"]) != 1 || got["c2"][0] != id {
		t.Fatalf("stop messages after the resume: %v", got)
	}

	// c2 ends without a $disconnect: the post finds it gone and forgets it.
	se.poster.gone["c2"] = true
	se.Clock.Advance(20 * time.Second)
	if res, err := se.stopper.Resend(ctx); err != nil || res.Resent != 1 {
		t.Fatalf("stop job to a gone connection: %+v %v", res, err)
	}
	if conn, err := se.Store.NodeConnection(ctx, "acme", node, se.Clock.Now()); err != nil || conn != "" {
		t.Fatalf("the node's connection after a gone post: %q %v", conn, err)
	}
}
