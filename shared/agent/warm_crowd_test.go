package agent

import (
	"testing"
	"time"
)

// The pool holds its refill while more than warmStarts handovers fall
// within warmCrowd, and only then: a lease every 200 ms, or a pool of at
// most warmStarts, never holds it.
func TestWarmCrowd(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name  string
		every time.Duration
		takes int
		crowd bool
	}{
		{"a burst", 0, warmStarts + 1, true},
		{"a lease every 100 ms", 100 * time.Millisecond, warmStarts + 1, true},
		{"a lease every 200 ms", 200 * time.Millisecond, 20, false},
		{"a pool of warmStarts, taken at once", 0, warmStarts, false},
		{"a burst a window ago", 0, warmStarts + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWarmPool(&Agent{})
			start := now.Add(-time.Duration(tc.takes-1) * tc.every)
			if tc.name == "a burst a window ago" {
				start = now.Add(-warmCrowd)
			}
			for i := range tc.takes {
				w.takes = append(w.takes, start.Add(time.Duration(i)*tc.every))
				if len(w.takes) > warmStarts+1 {
					w.takes = w.takes[1:]
				}
			}
			checkHeld(t, w, w.crowdLocked, now, tc.crowd)
		})
	}
}

// A handover holds the refill of its template, while it still has ready
// processes, for warmSettle after it, and arranges a poke for then; another
// template's handovers hold nothing of it.
func TestWarmSettle(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		takes    map[string]time.Duration // each template's last handover, how long before now
		settling bool
	}{
		{"no handover yet", nil, false},
		{"a handover just now", map[string]time.Duration{"a": 10 * time.Millisecond}, true},
		{"a handover a while ago", map[string]time.Duration{"a": warmSettle}, false},
		{"another template's just now", map[string]time.Duration{"a": time.Second, "b": 10 * time.Millisecond}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWarmPool(&Agent{})
			for name, ago := range tc.takes {
				w.lastTake[name] = now.Add(-ago)
			}
			held := func(now time.Time) bool { return w.settlingLocked("a", now) }
			checkHeld(t, w, held, now, tc.settling)
		})
	}
}

// checkHeld asks held (crowdLocked or settlingLocked) whether the pool
// holds its refill now, and checks that a hold arranged a poke for when it
// ends.
func checkHeld(t *testing.T, w *warmPool, held func(time.Time) bool, now time.Time, want bool) {
	t.Helper()
	w.mu.Lock()
	got := held(now)
	w.mu.Unlock()
	if got != want {
		t.Fatalf("held = %v, want %v", got, want)
	}
	if got && w.calm == nil {
		t.Fatal("no poke arranged for when the hold ends")
	}
	if w.calm != nil {
		w.calm.Stop()
	}
}
