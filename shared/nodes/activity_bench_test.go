package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/activity"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/metrics"
	"github.com/envlease/envlease/shared/nodes"
)

// BenchmarkActivityReports pins what activity reporting costs a busy node:
// ten environments of a template with a 30-minute idle timeout that counts
// CPU, all computing for one simulated hour, each fed to its tracker every
// 5 s, on the node protocol's heartbeat (every 10 s, as in AWS) on the fake
// clock. It reports the DynamoDB calls per node-minute of the beats with
// activity, and without (the same hour with nothing to report), and the
// reports (touches) per environment-hour.
//
//	go test ./shared/nodes -run '^$' -bench ActivityReports -benchtime 1x
func BenchmarkActivityReports(b *testing.B) {
	const busy = 10
	const hour = time.Hour
	for _, counted := range []bool{true, false} {
		name := "cpu-counted"
		if !counted {
			name = "nothing-to-report"
		}
		b.Run(name, func(b *testing.B) {
			var calls, reports int64
			for b.Loop() {
				calls, reports = activityHour(b, busy, hour, counted)
			}
			b.ReportMetric(float64(calls)/hour.Minutes(), "ddb/node-min")
			b.ReportMetric(float64(reports)/busy/hour.Hours(), "reports/env-hour")
		})
	}
}

func activityHour(b *testing.B, busy int, span time.Duration, counted bool) (calls, reports int64) {
	e := apitest.New(b, func(e *apitest.Env) [][]httpapi.Route {
		return [][]httpapi.Route{environments.Routes(environments.NewService(e.Store, e.Clock))}
	})
	svc := nodes.NewService(e.Store, stubLinks{}, e.Clock, nodes.Options{})
	ctx := context.Background()
	idle := &domain.Idle{Activity: []string{domain.ActivityAPI}}
	if counted {
		idle = &domain.Idle{Activity: []string{domain.ActivityCPU}}
	}
	tmpl := domain.Template{Name: "cruncher", Command: []string{"true"}, Runtime: "process", Pools: []string{"local"},
		Quota: domain.Quota{MaxLeases: busy}, Idle: idle,
		Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)}}
	if err := e.Store.PutTemplate(ctx, "acme", tmpl); err != nil {
		b.Fatal(err)
	}
	admin, err := e.Auth.Authenticate(ctx, "Bearer "+apitest.AliceToken, "192.0.2.1:1")
	if err != nil {
		b.Fatal(err)
	}
	issued, err := svc.IssueCredential(ctx, admin, "local", "bench")
	if err != nil {
		b.Fatal(err)
	}
	p, err := e.Auth.Authenticate(ctx, "Bearer "+issued.Token, "192.0.2.1:1")
	if err != nil {
		b.Fatal(err)
	}
	reg, err := svc.Register(ctx, p, nodes.RegisterRequest{Name: "n1", Address: "127.0.0.1", Capacity: busy, Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	node := reg.Node.ID
	trackers := map[string]*activity.Tracker{}
	for range busy {
		if r := e.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "cruncher"}); r.Status != 201 {
			b.Fatalf("lease: %d %s", r.Status, r.Body)
		}
	}
	for range busy {
		c, err := svc.Claim(ctx, p, node, 0)
		if err != nil || c == nil {
			b.Fatalf("claim: %v", err)
		}
		if _, err := svc.ReportState(ctx, p, node, c.Environment.ID, nodes.Report{State: domain.StateReady}); err != nil {
			b.Fatal(err)
		}
		trackers[c.Environment.ID] = activity.New(c.Template.Idle, time.Duration(c.Environment.Idle), e.Clock.Now())
	}
	if len(trackers) != busy {
		b.Fatalf("claimed %d of %d", len(trackers), busy)
	}
	var deadline time.Time
	cpu := 0.0
	for start := e.Clock.Now(); e.Clock.Now().Sub(start) < span; {
		for range 2 { // samples every 5 s
			e.Clock.Advance(5 * time.Second)
			cpu += 5
			for _, tr := range trackers {
				tr.CPU(e.Clock.Now(), cpu)
			}
		}
		var active []string
		for id, tr := range trackers {
			if tr.Due(e.Clock.Now()) {
				active = append(active, id)
			}
		}
		reports += int64(len(active))
		rctx, req := metrics.WithRequest(ctx)
		beat, err := svc.SocketHeartbeat(rctx, p, nodes.Message{Type: nodes.MsgHeartbeat, Node: node, Running: busy, Deadline: deadline, Active: active})
		if err != nil {
			b.Fatal(err)
		}
		deadline = beat.Deadline
		calls += req.DynamoCalls()
	}
	for id := range trackers {
		got, err := e.Store.GetEnvironment(ctx, "acme", id)
		if err != nil {
			b.Fatal(err)
		}
		// No timeout job runs here: only what counted must still be live.
		if counted && !got.State.Live() {
			b.Fatalf("%s after an hour of computing: %s (%s)", id, got.State, got.StopReason)
		}
	}
	return calls, reports
}
