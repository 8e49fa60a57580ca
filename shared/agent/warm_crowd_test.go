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

// A handover holds the refill of a template that still has ready
// processes for warmSettle after it, and arranges a poke for then.
func TestWarmSettle(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		takes    []time.Duration // how long before now each handover was
		settling bool
	}{
		{"no handover yet", nil, false},
		{"a handover just now", []time.Duration{10 * time.Millisecond}, true},
		{"the last of several just now", []time.Duration{300 * time.Millisecond, 50 * time.Millisecond}, true},
		{"a handover a while ago", []time.Duration{warmSettle}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWarmPool(&Agent{})
			for _, ago := range tc.takes {
				w.takes = append(w.takes, now.Add(-ago))
			}
			checkHeld(t, w, w.settlingLocked, now, tc.settling)
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
