package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// A node whose heartbeat deadline has passed is lost after one scheduled
// event; one that heartbeat since its index entry was written is moved, not
// lost; the summary is logged as JSON; a second delivery finds nothing.
func TestScheduledEventSweepsLostNodes(t *testing.T) {
	e := apitest.New(t, nil)
	ctx := context.Background()
	now := e.Clock.Now()
	for _, n := range []domain.Node{
		{OrgID: "acme", ID: "node_lost", Name: "lost", Pool: "local", Capacity: 1, State: domain.NodeActive,
			Registered: now.Add(-time.Hour), LastHeartbeat: now.Add(-2 * time.Minute), Deadline: now.Add(-time.Minute), Version: 1},
		{OrgID: "acme", ID: "node_alive", Name: "alive", Pool: "local", Capacity: 1, State: domain.NodeActive,
			Registered: now.Add(-time.Hour), LastHeartbeat: now.Add(-2 * time.Minute), Deadline: now.Add(-time.Minute), Version: 1},
	} {
		if err := e.Store.PutNode(ctx, n, ""); err != nil {
			t.Fatal(err)
		}
	}
	alive, err := e.Store.GetNode(ctx, "acme", "node_alive")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.HeartbeatNode(ctx, alive, now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	svc := nodes.NewService(e.Store, nil, e.Clock, nodes.Options{})
	h := handler(svc.SweepLostNodes, e.Clock, slog.New(slog.NewJSONHandler(&logs, nil)))
	var ev events.EventBridgeEvent
	res, err := h(ctx, ev)
	if err != nil || res.Nodes != 1 || res.Reindexed != 1 || res.More {
		t.Fatalf("first sweep: %+v %v", res, err)
	}
	if !strings.Contains(logs.String(), `"msg":"lost-node sweep"`) || !strings.Contains(logs.String(), `"nodes":1`) {
		t.Fatalf("log: %s", logs.String())
	}
	for id, want := range map[string]string{"node_lost": domain.NodeLost, "node_alive": domain.NodeActive} {
		if n, err := e.Store.GetNode(ctx, "acme", id); err != nil || n.State != want {
			t.Fatalf("%s: %+v %v, want %s", id, n, err, want)
		}
	}
	if res, err := h(ctx, ev); err != nil || res.Nodes != 0 || res.Reindexed != 0 {
		t.Fatalf("second sweep: %+v %v", res, err)
	}
}

// A failing sweep fails the invocation.
func TestFailingSweepFailsTheInvocation(t *testing.T) {
	boom := errors.New("table unavailable")
	h := handler(func(context.Context, time.Time) (nodes.SweepResult, error) { return nodes.SweepResult{}, boom },
		apitest.New(t, nil).Clock, apitest.DiscardLogger())
	if _, err := h(context.Background(), events.EventBridgeEvent{}); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}
