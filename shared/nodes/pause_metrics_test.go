package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// A paused environment's node tears it down and reports stopped with the
// metrics of the run that paused: they are kept (its history while it
// sleeps), and the environment stays paused, let go by the node.
func TestPausedTeardownKeepsItsMetrics(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 4)
	id := se.runningOn(t, "c1", tok, node)
	e, err := se.Store.GetEnvironment(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := se.Store.GetTemplate(ctx, "acme", e.Template)
	if err != nil {
		t.Fatal(err)
	}
	tpl.Quota.MaxPaused = 1
	if err := se.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := se.Store.PauseEnvironment(ctx, e, "art_checkpoint", time.Hour, se.Clock.Now()); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	samples := []domain.MetricSample{{Time: se.Clock.Now().Add(-time.Minute).UTC(), CPU: 12.5, Memory: 1 << 20, Processes: 2}}
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgReport, ID: "s", Node: node, Environment: id,
		Report: &nodes.Report{State: domain.StateStopped, Metrics: samples}})
	if r.Record == nil || r.Record.State != domain.StatePaused || r.Record.Node != "" {
		t.Fatalf("report stopped of a paused environment: %+v", r)
	}
	h, err := se.Store.GetEnvMetrics(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 || h[0].CPU != 12.5 {
		t.Fatalf("history of the paused environment: %+v, want the samples its node reported", h)
	}
}
