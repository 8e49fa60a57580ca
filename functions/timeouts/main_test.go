package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/timeouts"
)

func scheduled(t *testing.T) events.EventBridgeEvent {
	t.Helper()
	var ev events.EventBridgeEvent
	apitest.Event(t, "scheduled-timeouts.json", &ev)
	if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" {
		t.Fatalf("not a scheduled event: %+v", ev)
	}
	return ev
}

// The sample EventBridge event goes through the handler against minidyn: a
// leased environment past its idle deadline is stopped, the summary is
// logged as JSON, and the extra sweeps run with the same instant.
func TestScheduledEventStopsDueEnvironments(t *testing.T) {
	e := apitest.New(t, nil)
	ctx := context.Background()
	svc := environments.NewService(e.Store, e.Clock)
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}
	for range 2 {
		if _, err := svc.Lease(ctx, bob, environments.LeaseRequest{Template: "sleeper"}, ""); err != nil {
			t.Fatal(err)
		}
	}
	e.Clock.Advance(10 * time.Minute) // sleeper's idle timeout

	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	var swept []time.Time
	extra := func(_ context.Context, now time.Time) error { swept = append(swept, now); return nil }
	h := handler(e.Store, e.Clock, log, timeouts.Options{}, extra)

	sum, err := h(ctx, scheduled(t))
	if err != nil || sum.Found != 2 || sum.Stopped != 2 || sum.Idle != 2 || sum.Pages != len(e.Store.EnvDuePartitions()) {
		t.Fatalf("first run: %+v %v", sum, err)
	}
	if len(swept) != 1 || !swept[0].Equal(e.Clock.Now()) {
		t.Fatalf("extra sweep ran at %v", swept)
	}
	var line struct {
		Msg     string           `json:"msg"`
		Event   string           `json:"event"`
		Summary timeouts.Summary `json:"summary"`
	}
	if err := json.Unmarshal([]byte(strings.Split(logs.String(), "\n")[0]), &line); err != nil {
		t.Fatalf("log is not JSON: %v: %s", err, logs.String())
	}
	if line.Msg != "timeouts run" || line.Event != "5b1e0c6a-7f1d-4f3a-9d0e-0a1b2c3d4e5f" || line.Summary.Stopped != 2 ||
		!strings.Contains(logs.String(), `"alreadyStopped":0`) {
		t.Fatalf("log line %s", logs.String())
	}

	// EventBridge may deliver the same event again: nothing is stopped twice.
	if sum, err = h(ctx, scheduled(t)); err != nil || sum.Found != 0 || sum.Stopped != 0 {
		t.Fatalf("second run: %+v %v", sum, err)
	}
	qs, err := e.Store.ListQuotas(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Running != 0 {
			t.Fatalf("running %s = %d", q.Template, q.Running)
		}
	}
}

// A failing extra sweep fails the invocation (so it is retried and seen),
// after the timeout job has done its work.
func TestFailingExtraSweepFailsTheInvocation(t *testing.T) {
	e := apitest.New(t, nil)
	boom := errors.New("lost-node sweep: table unavailable")
	h := handler(e.Store, e.Clock, apitest.DiscardLogger(), timeouts.Options{},
		func(context.Context, time.Time) error { return boom })
	if _, err := h(context.Background(), scheduled(t)); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}
