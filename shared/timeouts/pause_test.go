package timeouts_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/templates"
	"github.com/envlease/envlease/shared/usage"
)

// napper pauses its idle environments: at most one paused at once, kept
// two hours.
var napper = domain.Template{
	Name: "napper", Command: []string{"sleep", "3600"}, Runtime: "process", Pools: []string{"local"},
	Timeouts: domain.Timeouts{Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
	Idle:     &domain.Idle{Action: domain.IdlePause, Retention: domain.Duration(2 * time.Hour)},
	Quota:    domain.Quota{MaxLeases: 2, MaxPaused: 1},
}

func newPauseEnv(t *testing.T) *apitest.Env {
	t.Helper()
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		tpl := templates.NewService(e.Store)
		return [][]httpapi.Route{
			environments.Routes(environments.NewService(e.Store, e.Clock, environments.WithTemplateTTL(0))),
			templates.QuotaRoutes(tpl), events.Routes(events.NewService(e.Store, e.Clock)),
			usage.Routes(usage.NewService(e.Store, e.Clock)),
		}
	})
	if err := e.Store.PutTemplate(context.Background(), "acme", napper); err != nil {
		t.Fatal(err)
	}
	return e
}

// onNode is what a node's claim and ready report write: ready on node-1.
func onNode(t *testing.T, e *apitest.Env, id string) domain.Environment {
	t.Helper()
	ctx := context.Background()
	env, err := e.Store.GetEnvironment(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	after := env
	after.State, after.Node = domain.StateStarting, "node-1"
	if env.State == domain.StatePending {
		if err := e.Store.PutEnvironments(ctx, []domain.Environment{after}); err != nil {
			t.Fatal(err)
		}
		env = after
	}
	after = env
	after.State = domain.StateReady
	got, ok, err := e.Store.ReplaceEnvironment(ctx, env, after)
	if err != nil || !ok {
		t.Fatalf("ready: %v %v", ok, err)
	}
	return got
}

type quotaRow struct {
	Template  string `json:"template"`
	Running   int    `json:"running"`
	MaxPaused int    `json:"maxPaused"`
	Paused    *int   `json:"paused"`
}

func napperQuota(t *testing.T, e *apitest.Env) quotaRow {
	t.Helper()
	var b struct {
		Quotas []quotaRow `json:"quotas"`
	}
	e.Do(http.MethodGet, "/v1/quotas", apitest.BobToken, nil).JSON(t, &b)
	for _, q := range b.Quotas {
		if q.Template == "napper" {
			if q.Paused == nil {
				t.Fatalf("napper's quota row has no paused count: %+v", q)
			}
			return q
		}
	}
	t.Fatalf("no napper quota in %+v", b)
	return quotaRow{}
}

// The whole pause cycle on the fake clock, the node's side written as its
// reports would: idle asks for a pause checkpoint (not a stop); once sealed
// the environment is paused, its running slot given for a paused one; a
// second pause past maxPaused is refused and stopped instead; a touch
// wakes it (503 waking while its node still lets it go), pending again from
// its checkpoint; a paused environment past its retention is deleted with
// reason retention. Quotas count running and paused apart, the events say
// paused and resumed, and the paused time is not usage.
func TestIdlePausesWakesAndRetentionDeletes(t *testing.T) {
	e := newPauseEnv(t)
	ctx := context.Background()
	t0 := e.Clock.Now()
	a := lease(t, e, apitest.BobToken, "napper")
	b := lease(t, e, apitest.BobToken, "napper")
	envA, envB := onNode(t, e, a), onNode(t, e, b)
	if envA.OnIdle != domain.IdlePause || envA.Retention != napper.Idle.Retention {
		t.Fatalf("the lease did not keep the idle action: %q %v", envA.OnIdle, envA.Retention)
	}

	e.Clock.Advance(11 * time.Minute)
	if s := sweep(t, e); s.Pausing != 2 || s.Stopped != 0 {
		t.Fatalf("idle with pause: %+v", s)
	}
	for _, id := range []string{a, b} {
		cur, _ := e.Store.GetEnvironment(ctx, "acme", id)
		if cur.State != domain.StateReady || cur.Checkpoint == nil || !cur.Checkpoint.Pause || cur.Checkpoint.State != domain.CheckpointPacking {
			t.Fatalf("%s: %s %+v, want ready with a pause checkpoint packing", id, cur.State, cur.Checkpoint)
		}
	}
	// A run while they pack asks nothing again.
	if s := sweep(t, e); s.Pausing != 2 {
		t.Fatalf("while packing: %+v", s)
	}

	// A's checkpoint sealed: paused. B's too, but the template may keep
	// only one paused.
	envA, _ = e.Store.GetEnvironment(ctx, "acme", a)
	pausedA, ok, err := e.Store.PauseEnvironment(ctx, envA, "art_ckpa", 2*time.Hour, e.Clock.Now())
	if err != nil || !ok || pausedA.State != domain.StatePaused || pausedA.StopReason != domain.PauseIdle {
		t.Fatalf("pause A: %v %v %+v", ok, err, pausedA)
	}
	envB, _ = e.Store.GetEnvironment(ctx, "acme", b)
	if _, _, err := e.Store.PauseEnvironment(ctx, envB, "art_ckpb", 2*time.Hour, e.Clock.Now()); !errors.Is(err, domain.ErrPausedQuotaFull) {
		t.Fatalf("a second paused one past maxPaused 1: %v", err)
	}
	if q := napperQuota(t, e); q.Running != 1 || *q.Paused != 1 || q.MaxPaused != 1 {
		t.Fatalf("quota after one pause: %+v", q)
	}
	// B's pause never finishes: past PauseTimeout it is stopped, as stop would.
	e.Clock.Advance(31 * time.Minute)
	if s := sweep(t, e); s.Idle != 1 || s.Pausing != 0 {
		t.Fatalf("a pause that never finished: %+v", s)
	}
	if g := get(t, e, apitest.BobToken, b); g.State != "stopping" || g.StopReason != "idle" {
		t.Fatalf("B: %+v", g)
	}

	// A paused environment is listed as paused, with what it keeps.
	got := get(t, e, apitest.BobToken, a)
	if got.State != "paused" || got.StopReason != "idle" {
		t.Fatalf("A: %+v", got)
	}
	// Its node has not said it is down: a touch is told to ask again.
	r := touch(t, e, a)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("touch while its node lets it go: %d %s", r.Status, r.Body)
	}
	letGo(t, e, a)
	wakeAt := e.Clock.Now()
	r = touch(t, e, a)
	var woken domain.Environment
	r.JSON(t, &woken)
	if r.Status != 200 || woken.State != domain.StatePending || woken.Snapshot != "art_ckpa" || woken.Node != "" || woken.Resumed == nil {
		t.Fatalf("touch of a paused environment: %d %s", r.Status, r.Body)
	}
	if q := napperQuota(t, e); q.Running != 1 || *q.Paused != 0 {
		t.Fatalf("quota after the wake: %+v", q)
	}

	// It runs again, goes idle again, pauses again, and is kept 2 h.
	onNode(t, e, a)
	e.Clock.Advance(11 * time.Minute)
	if s := sweep(t, e); s.Pausing != 1 {
		t.Fatalf("idle again: %+v", s)
	}
	envA, _ = e.Store.GetEnvironment(ctx, "acme", a)
	pauseAt := e.Clock.Now()
	if _, ok, err := e.Store.PauseEnvironment(ctx, envA, "art_ckpa2", 2*time.Hour, pauseAt); err != nil || !ok {
		t.Fatalf("pause again: %v %v", ok, err)
	}
	letGo(t, e, a)
	e.Clock.Advance(time.Hour)
	if s := sweep(t, e); s.Ended != 0 {
		t.Fatalf("within its retention: %+v", s)
	}
	e.Clock.Advance(time.Hour)
	if s := sweep(t, e); s.Ended != 1 {
		t.Fatalf("past its retention: %+v", s)
	}
	if g := get(t, e, apitest.BobToken, a); g.State != "stopped" || g.StopReason != "retention" {
		t.Fatalf("A past its retention: %+v", g)
	}
	if q := napperQuota(t, e); q.Running != 0 || *q.Paused != 0 {
		t.Fatalf("quota at the end: %+v", q)
	}

	// The events say why.
	var evs struct {
		Events []struct {
			Type    string              `json:"type"`
			Subject struct{ ID string } `json:"subject"`
			Data    map[string]any      `json:"data"`
		} `json:"events"`
	}
	e.Do(http.MethodGet, "/v1/events?subject=environment/"+a+"&limit=100", apitest.AliceToken, nil).JSON(t, &evs)
	seen := map[string]any{}
	for _, ev := range evs.Events {
		if _, ok := seen[ev.Type]; !ok {
			seen[ev.Type] = ev.Data["reason"]
		}
	}
	if seen[domain.EventEnvPaused] != "idle" || seen[domain.EventEnvStopped] != "retention" {
		t.Fatalf("events: %v", seen)
	}
	if _, ok := seen[domain.EventEnvResumed]; !ok {
		t.Fatalf("no resumed event: %v", seen)
	}

	// A's usage is its two runs of 11 minutes, not the time it was paused.
	var rep struct {
		Usage []struct {
			Template string `json:"template"`
			Seconds  int64  `json:"seconds"`
		} `json:"usage"`
	}
	e.Do(http.MethodGet, "/v1/usage?since="+t0.Format("2006-01-02"), apitest.BobToken, nil).JSON(t, &rep)
	var total int64
	for _, u := range rep.Usage {
		if u.Template == "napper" {
			total += u.Seconds
		}
	}
	stoppedB, _ := e.Store.GetEnvironment(ctx, "acme", b)
	wantA := int64(11*60) + int64(pauseAt.Sub(wakeAt)/time.Second)
	wantB := int64(stoppedB.Stopped.Sub(stoppedB.Created) / time.Second)
	if total != wantA+wantB {
		t.Fatalf("napper usage %d s, want %d (A) + %d (B)", total, wantA, wantB)
	}
}

// letGo is a paused environment's node reporting it down.
func letGo(t *testing.T, e *apitest.Env, id string) {
	t.Helper()
	ctx := context.Background()
	env, err := e.Store.GetEnvironment(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	after := env
	after.Node = ""
	if _, ok, err := e.Store.ReplaceEnvironment(ctx, env, after); err != nil || !ok {
		t.Fatalf("let go: %v %v", ok, err)
	}
}

// A paused environment past its retention (or its hard end) that the
// timeout job has not deleted yet does not wake: 410, and neither its
// running slot nor its paused one moves until the job deletes it.
func TestNoWakePastRetention(t *testing.T) {
	e := newPauseEnv(t)
	ctx := context.Background()
	a := lease(t, e, apitest.BobToken, "napper")
	env := onNode(t, e, a)
	if _, ok, err := e.Store.PauseEnvironment(ctx, env, "art_ckpa", 2*time.Hour, e.Clock.Now()); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	letGo(t, e, a)
	e.Clock.Advance(2*time.Hour + time.Second)
	if r := touch(t, e, a); r.Status != http.StatusGone {
		t.Fatalf("touch past the retention: %d %s, want 410", r.Status, r.Body)
	}
	if r := e.Do("POST", "/v1/environments/"+a+"/wake", apitest.BobToken, nil); r.Status != http.StatusGone {
		t.Fatalf("wake past the retention: %d %s, want 410", r.Status, r.Body)
	}
	if q := napperQuota(t, e); q.Running != 0 || *q.Paused != 1 {
		t.Fatalf("quota after the refused wakes: %+v", q)
	}
	if s := sweep(t, e); s.Ended != 1 {
		t.Fatalf("the job after the refused wakes: %+v", s)
	}
	cur, _ := e.Store.GetEnvironment(ctx, "acme", a)
	if cur.State != domain.StateStopped || cur.StopReason != domain.StopRetention {
		t.Fatalf("after the job: %s %q", cur.State, cur.StopReason)
	}
}

// A paused environment deleted before its node said it tore it down is
// stopping, not stopped: its node still holds it and is told until it
// reports it down (a stopped one's notice is dropped). Its paused slot is
// released at once, its running one was already.
func TestDeleteWhileTheNodeLetsGo(t *testing.T) {
	e := newPauseEnv(t)
	ctx := context.Background()
	a := lease(t, e, apitest.BobToken, "napper")
	env := onNode(t, e, a)
	if _, ok, err := e.Store.PauseEnvironment(ctx, env, "art_ckpa", 2*time.Hour, e.Clock.Now()); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	r := e.Do("DELETE", "/v1/environments/"+a, apitest.BobToken, nil)
	var got domain.Environment
	r.JSON(t, &got)
	if r.Status != http.StatusOK || got.State != domain.StateStopping || got.StopReason != domain.StopDeleted || got.Node == "" {
		t.Fatalf("delete while its node lets it go: %d %s", r.Status, r.Body)
	}
	if q := napperQuota(t, e); q.Running != 0 || *q.Paused != 0 {
		t.Fatalf("quota after the delete: %+v", q)
	}
	// Deleted once its node let it go: stopped at once.
	b := lease(t, e, apitest.BobToken, "napper")
	env = onNode(t, e, b)
	if _, ok, err := e.Store.PauseEnvironment(ctx, env, "art_ckpb", 2*time.Hour, e.Clock.Now()); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	letGo(t, e, b)
	r = e.Do("DELETE", "/v1/environments/"+b, apitest.BobToken, nil)
	r.JSON(t, &got)
	if r.Status != http.StatusOK || got.State != domain.StateStopped {
		t.Fatalf("delete once let go: %d %s", r.Status, r.Body)
	}
}
