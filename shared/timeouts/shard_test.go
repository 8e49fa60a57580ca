package timeouts_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/timeouts"
)

// A touch leaves the due-index entry at the lease's deadline. The run that
// finds it there reads the base item, sees the deadline moved, and moves the
// entry to it (one write), without stopping anything; the run at the real
// deadline stops it.
func TestTouchedEnvironmentIsReindexedThenStoppedOnTime(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.BobToken, "sleeper") // idle 10m
	e.Clock.Advance(8 * time.Minute)
	if r := e.Do(http.MethodPost, "/v1/environments/"+id+"/touch", apitest.BobToken, nil); r.Status != http.StatusOK {
		t.Fatalf("touch: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(2 * time.Minute) // the lease's deadline: the entry is due, the item is not
	if s := sweep(t, e); s.Found != 1 || s.NotDue != 1 || s.Reindexed != 1 || s.Stopped != 0 {
		t.Fatalf("at the stale entry: %+v", s)
	}
	if st := get(t, e, apitest.BobToken, id).State; st != "pending" {
		t.Fatalf("state %s", st)
	}
	// The entry now holds the touched deadline: nothing is found before it.
	e.Clock.Advance(8*time.Minute - time.Second)
	if s := sweep(t, e); s.Found != 0 {
		t.Fatalf("before the touched deadline: %+v", s)
	}
	e.Clock.Advance(time.Second)
	if s := sweep(t, e); s.Found != 1 || s.Stopped != 1 || s.Idle != 1 {
		t.Fatalf("at the touched deadline: %+v", s)
	}
	expectStopped(t, e, id, timeouts.ReasonIdle, e.Clock.Now())
}

// budgetStore moves the clock that measures the run's budget on by step at
// every stop, as a long run's stops take real time.
type budgetStore struct {
	*store.Store
	clk  *clock.Fake
	step time.Duration
}

func (b budgetStore) StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error) {
	b.clk.Advance(b.step)
	return b.Store.StopEnvironment(ctx, e, to, reason, now)
}

// A run stops taking work when its budget (the context's deadline less the
// margin) is spent, says there is more, and the next run stops the rest:
// nothing is lost and nothing stopped twice.
func TestRunStopsAtItsBudgetAndTheNextRunGoesOn(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := e.Clock.Now()
	var envs []domain.Environment
	for i := range 60 {
		created := now.Add(-time.Hour)
		envs = append(envs, domain.Environment{
			OrgID: "acme", ID: fmt.Sprintf("env_budget%03d", i), Name: "seed", Template: "sleeper",
			State: domain.StatePending, Pool: "local", CreatedBy: "user:bob", Created: created,
			Expires: created.Add(2 * time.Hour), IdleUntil: now.Add(-time.Second),
			Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(2 * time.Hour), Version: 1,
		})
	}
	if err := e.Store.PutEnvironments(ctx, envs); err != nil {
		t.Fatal(err)
	}
	setRunning(t, e, "acme", "sleeper", 60)

	// 50 s of budget less a 5 s margin; every stop "takes" a second.
	budgetClock := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	runCtx, cancel := context.WithDeadline(ctx, budgetClock.Now().Add(50*time.Second))
	defer cancel()
	st := budgetStore{Store: e.Store, clk: budgetClock, step: time.Second}
	opts := timeouts.Options{Margin: 5 * time.Second, BudgetClock: budgetClock, ShardWorkers: 1, Workers: 1}
	first, err := timeouts.Run(runCtx, st, e.Clock, opts)
	if err != nil || !first.More || first.Stopped < 40 || first.Stopped > 45 {
		t.Fatalf("first run: %+v %v, want about 45 stopped and more", first, err)
	}
	second := sweep(t, e)
	if second.Stopped != 60-first.Stopped || second.More || second.AlreadyStopped != 0 {
		t.Fatalf("second run: %+v after %d", second, first.Stopped)
	}
	if n := running(t, e, "acme", "sleeper"); n != 0 {
		t.Fatalf("running %d", n)
	}
}
