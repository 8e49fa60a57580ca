package sweep_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/sweep"
)

func TestBudget(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	cases := []struct {
		name     string
		deadline time.Duration // 0: none
		margin   time.Duration
		after    time.Duration
		spent    bool
	}{
		{"no deadline", 0, time.Second, 1000 * time.Hour, false},
		{"before the margin", 50 * time.Second, 5 * time.Second, 44 * time.Second, false},
		{"at the margin", 50 * time.Second, 5 * time.Second, 45 * time.Second, true},
		{"a short run keeps half its time", 4 * time.Second, 5 * time.Second, 1999 * time.Millisecond, false},
		{"and no more", 4 * time.Second, 5 * time.Second, 2 * time.Second, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, clk.Now().Add(c.deadline))
				defer cancel()
			}
			if got := budgetAt(ctx, clk, c.margin, c.after); got != c.spent {
				t.Errorf("spent %v after %v, want %v", got, c.after, c.spent)
			}
		})
	}
}

// budgetAt makes a budget at clk's instant and reports whether it is spent
// after d.
func budgetAt(ctx context.Context, start *clock.Fake, margin, d time.Duration) bool {
	clk := clock.NewFake(start.Now())
	b := sweep.NewBudget(ctx, clk, margin)
	clk.Advance(d)
	return b.Spent()
}

// Each calls fn once per partition, never with more than workers at once.
func TestEachVisitsEveryPartitionOnceWithBoundedWorkers(t *testing.T) {
	parts := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	var mu sync.Mutex
	seen := map[string]int{}
	var inFlight, most atomic.Int32
	sweep.Each(context.Background(), parts, 3, func(_ context.Context, p string) {
		n := inFlight.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		seen[p]++
		mu.Unlock()
		inFlight.Add(-1)
	})
	for _, p := range parts {
		if seen[p] != 1 {
			t.Errorf("%s visited %d times", p, seen[p])
		}
	}
	if most.Load() > 3 {
		t.Errorf("%d at once, want at most 3", most.Load())
	}
}

// Work starts no call once the budget is spent, even for an item handed to
// the worker while its last call ran: every call "takes" a second of a 10 s
// budget less a 5 s margin, so exactly five run and the rest are left. (With
// one worker the calls are one after another; with more, calls already
// checked in may overlap the one that spends the budget.)
func TestWorkStartsNothingPastTheBudget(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(10*time.Second))
	defer cancel()
	budget := sweep.NewBudget(ctx, clk, 5*time.Second)
	calls := 0
	items := make([]int, 20)
	left := sweep.Work(items, 1, budget, func(int) {
		if budget.Spent() {
			t.Error("a call started with the budget spent")
		}
		calls++
		// The call lasts long enough that the feeder has handed over the
		// next item (the budget not yet spent) before it is.
		time.Sleep(time.Millisecond)
		clk.Advance(time.Second)
	})
	if !left || calls != 5 {
		t.Errorf("%d calls, left %v; want 5 and left", calls, left)
	}
	if left := sweep.Work(items[:3], 2, sweep.NewBudget(context.Background(), clk, 0), func(int) {}); left {
		t.Error("an unbounded run left work")
	}
}
