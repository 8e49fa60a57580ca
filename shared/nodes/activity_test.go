package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/activity"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/timeouts"
)

// A command that computes for two minutes without any API call, in an
// environment whose idle timeout is one minute, is not idle when its
// template counts CPU: the node's tracker (fed what the cgroup would say:
// one CPU busy) reports it active every quarter of the timeout, and the
// timeout job, run every 5 s on the fake clock, never finds it due. Once
// the computation ends it is stopped as idle. The same computation in a
// template that counts only touches is stopped after one minute. The
// number of reports is the DynamoDB cost: one touch per quarter timeout.
func TestComputingIsNotIdle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		idle      *domain.Idle
		wantAlive bool
	}{
		{"cpu counts", &domain.Idle{Activity: []string{domain.ActivityCPU}}, true},
		{"only touches count", &domain.Idle{Activity: []string{domain.ActivityAPI}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			tmpl := domain.Template{Name: "cruncher", Command: []string{"sh", "-c", "while :; do :; done"}, Runtime: "process",
				Pools: []string{"local"}, Quota: domain.Quota{MaxLeases: 2}, Idle: tc.idle,
				Timeouts: domain.Timeouts{Idle: domain.Duration(time.Minute), Hard: domain.Duration(time.Hour)}}
			if err := e.Store.PutTemplate(ctx, "acme", tmpl); err != nil {
				t.Fatal(err)
			}
			tok := e.credential(t, apitest.AliceToken, "local")
			node := e.register(t, tok, 4)
			id := e.lease(t, apitest.BobToken, map[string]any{"template": "cruncher"})
			c, r := e.claim(t, tok, node, "1s")
			if c == nil || c.Environment.ID != id {
				t.Fatalf("claim: %d %s", r.Status, r.Body)
			}
			if c.Template.Idle == nil || len(c.Template.Idle.Activity) != 1 {
				t.Fatalf("the claim's template lost its idle policy: %+v", c.Template.Idle)
			}
			if r := e.report(tok, node, id, map[string]any{"state": "ready"}); r.Status != 200 {
				t.Fatalf("ready: %d %s", r.Status, r.Body)
			}
			tr := activity.New(c.Template.Idle, time.Duration(c.Environment.Idle), e.Clock.Now())
			cpu, reports := 0.0, 0
			start := e.Clock.Now()
			var stoppedAt time.Time
			for e.Clock.Now().Sub(start) < 6*time.Minute && stoppedAt.IsZero() {
				e.Clock.Advance(5 * time.Second)
				now := e.Clock.Now()
				if now.Sub(start) <= 2*time.Minute {
					cpu += 5 // one CPU busy: 5 s of CPU time in 5 s
				}
				tr.CPU(now, cpu)
				body := map[string]any{"environments": []string{id}}
				if tr.Due(now) {
					body["active"] = []string{id}
					reports++
				}
				if r := e.Do("POST", "/v1/nodes/"+node+"/heartbeat", tok, body); r.Status != 200 {
					t.Fatalf("heartbeat: %d %s", r.Status, r.Body)
				}
				if _, err := timeouts.Run(ctx, e.Store, e.Clock, timeouts.Options{}); err != nil {
					t.Fatal(err)
				}
				if got := e.get(t, apitest.BobToken, id); !got.State.Live() {
					if got.StopReason != domain.StopIdle {
						t.Fatalf("stopped for %q", got.StopReason)
					}
					stoppedAt = now
				}
			}
			ran := stoppedAt.Sub(start)
			if !tc.wantAlive {
				if ran > time.Minute+5*time.Second {
					t.Fatalf("counting only touches, it ran %s while computing", ran)
				}
				return
			}
			// Computing until 2 min, idle from then (the CPU window of 1 min
			// still sees work until about 3 min), stopped a minute after the
			// last report (at 3 min: a report every 15 s).
			if ran <= 2*time.Minute || ran > 4*time.Minute+5*time.Second {
				t.Fatalf("counting CPU, it was stopped after %s (reports %d)", ran, reports)
			}
			// A quarter of the 1-minute timeout: a report every 15 s while
			// the window is busy (about 3 minutes), never one per beat.
			if reports < 8 || reports > 14 {
				t.Fatalf("%d reports in %s of 5-second beats", reports, ran)
			}
			t.Logf("computing 2 min, idle 1m: %d reports (touches), stopped as idle after %s", reports, ran)
		})
	}
}
