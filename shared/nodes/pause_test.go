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

// The node protocol's side of pausing, on the fake clock: the timeout job's
// pause checkpoint reaches the node in its heartbeat; a pause checkpoint
// that fails stops the idle environment (reason idle), one that ends after
// a touch leaves it running; a paused environment reads as stopping to its
// node, whose stopped report lets it go (still paused, no node).
func TestPauseOnTheNodeProtocol(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	putNapper(t, e)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 8)
	ready := func() string {
		t.Helper()
		id := e.lease(t, apitest.BobToken, map[string]any{"template": "napper"})
		c, r := e.claim(t, tok, node, "1s")
		if c == nil || c.Environment.ID != id {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
		if r := e.report(tok, node, id, map[string]any{"state": "ready"}); r.Status != 200 {
			t.Fatalf("ready: %d %s", r.Status, r.Body)
		}
		return id
	}
	beat := func(ids ...string) map[string]nodes.EnvState {
		t.Helper()
		r := e.Do("POST", "/v1/nodes/"+node+"/heartbeat", tok, map[string]any{"environments": ids})
		var b nodes.Beat
		r.JSON(t, &b)
		out := map[string]nodes.EnvState{}
		for _, st := range b.Environments {
			out[st.ID] = st
		}
		return out
	}
	// done reports the checkpoint's end over HTTP, where the service cannot
	// push to the node: the answer says whether the environment leaves it.
	done := func(id, ckp, why string) nodes.CheckpointEnd {
		t.Helper()
		r := e.Do("POST", "/v1/nodes/"+node+"/environments/"+id+"/checkpoints/"+ckp+"/done", tok, map[string]any{"error": why})
		if r.Status != 200 {
			t.Fatalf("done: %d %s", r.Status, r.Body)
		}
		var end nodes.CheckpointEnd
		r.JSON(t, &end)
		return end
	}

	failing, touched := ready(), ready()
	e.Clock.Advance(11 * time.Minute)
	if s, err := timeouts.Run(ctx, e.Store, e.Clock, timeouts.Options{}); err != nil || s.Pausing != 2 {
		t.Fatalf("run: %+v %v", s, err)
	}
	states := beat(failing, touched)
	for _, id := range []string{failing, touched} {
		if st := states[id]; st.State != domain.StateReady || st.Checkpoint == nil {
			t.Fatalf("%s in the heartbeat: %+v", id, st)
		}
	}
	// A failed pause checkpoint: stopped, as its template's stop would.
	if end := done(failing, states[failing].Checkpoint.ID, "the node's disk is full"); !end.Stop {
		t.Errorf("the answer to a failed pause's end does not tell the node to let it go: %+v", end)
	}
	if got := e.get(t, apitest.BobToken, failing); got.State != domain.StateStopping || got.StopReason != domain.StopIdle {
		t.Fatalf("a failed pause: %s %s", got.State, got.StopReason)
	}
	// Touched while it packed: it runs on, whatever the checkpoint says.
	if r := e.Do("POST", "/v1/environments/"+touched+"/touch", apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("touch: %d %s", r.Status, r.Body)
	}
	if end := done(touched, states[touched].Checkpoint.ID, "whatever"); end.Stop {
		t.Errorf("a touched environment's node told to let it go: %+v", end)
	}
	if got := e.get(t, apitest.BobToken, touched); got.State != domain.StateReady {
		t.Fatalf("touched while packing: %s %s", got.State, got.StopReason)
	}

	// Paused (as a sealed pause checkpoint makes it): its node is told to
	// tear it down, and its report lets it go.
	cur, err := e.Store.GetEnvironment(ctx, "acme", touched)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.Store.PauseEnvironment(ctx, cur, "art_x", time.Hour, e.Clock.Now()); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	if st := beat(touched)[touched]; st.State != domain.StateStopping {
		t.Fatalf("a paused environment to its node: %+v", st)
	}
	if r := e.report(tok, node, touched, map[string]any{"state": "stopped"}); r.Status != 200 {
		t.Fatalf("stopped: %d %s", r.Status, r.Body)
	}
	if got := e.get(t, apitest.BobToken, touched); got.State != domain.StatePaused || got.Node != "" {
		t.Fatalf("after its node let it go: %s on %q", got.State, got.Node)
	}
	if _, ok := beat(touched)[touched]; ok {
		t.Fatal("a paused environment its node let go is still the node's")
	}
}

// tellings records the environments a Teller was asked to stop.
type tellings struct{ told []domain.Environment }

func (t *tellings) Stop(_ context.Context, e domain.Environment) { t.told = append(t.told, e) }

// A pause (or an idle stop) is pushed to the node at once, as a delete is,
// so it does not hold the node's capacity until the stop job resends it.
func TestPauseTellsTheNodeAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	putNapper(t, e)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 8)
	var ids []string
	for range 2 {
		id := e.lease(t, apitest.BobToken, map[string]any{"template": "napper"})
		if c, r := e.claim(t, tok, node, "1s"); c == nil || c.Environment.ID != id {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
		if r := e.report(tok, node, id, map[string]any{"state": "ready"}); r.Status != 200 {
			t.Fatalf("ready: %d %s", r.Status, r.Body)
		}
		ids = append(ids, id)
	}
	e.Clock.Advance(11 * time.Minute)
	if s, err := timeouts.Run(ctx, e.Store, e.Clock, timeouts.Options{}); err != nil || s.Pausing != 2 {
		t.Fatalf("run: %+v %v", s, err)
	}
	rec := &tellings{}
	svc := nodes.NewService(e.Store, nil, e.Clock, nodes.Options{Teller: rec})
	for i, tc := range []struct {
		state string
		want  domain.State
	}{
		{domain.CheckpointSealed, domain.StatePaused},
		{domain.CheckpointFailed, domain.StateStopping},
	} {
		cur, err := e.Store.GetEnvironment(ctx, "acme", ids[i])
		if err != nil || cur.Checkpoint == nil {
			t.Fatalf("%s: %+v %v", ids[i], cur.Checkpoint, err)
		}
		c := *cur.Checkpoint
		c.State = tc.state
		if err := svc.FinishPause(ctx, "acme", ids[i], c); err != nil {
			t.Fatalf("%s: finish pause: %v", tc.state, err)
		}
		if len(rec.told) != i+1 {
			t.Fatalf("%s: told %d, want the node told at once", tc.state, len(rec.told))
		}
		if got := rec.told[i]; got.ID != ids[i] || got.State != tc.want || got.Node != node {
			t.Errorf("%s: told %s %s on %q, want %s %s on %q", tc.state, got.ID, got.State, got.Node, ids[i], tc.want, node)
		}
	}
}

// putNapper stores the template these tests lease: idle pauses it.
func putNapper(t *testing.T, e *env) {
	t.Helper()
	if err := e.Store.PutTemplate(context.Background(), "acme", domain.Template{
		Name: "napper", Command: []string{"sleep", "3600"}, Runtime: "process", Pools: []string{"local"},
		Timeouts: domain.Timeouts{Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
		Idle:     &domain.Idle{Action: domain.IdlePause},
		Quota:    domain.Quota{MaxLeases: 4},
	}); err != nil {
		t.Fatal(err)
	}
}
