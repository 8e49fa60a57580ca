package samples

import (
	"testing"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// A day of 5-second samples: the recent ones are the last 30 minutes, and the
// history covers the whole day within its bound, keeping the peak memory.
func TestSeriesBounds(t *testing.T) {
	s := New()
	t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	n := 24 * 3600 / 5
	for i := range n {
		mem := int64(100)
		if i == 5000 {
			mem = 1 << 30 // one peak
		}
		s.Add(domain.MetricSample{Time: t0.Add(time.Duration(i) * 5 * time.Second), CPU: 50, Memory: mem, Processes: 1})
	}
	last := t0.Add(time.Duration(n-1) * 5 * time.Second)
	recent := s.Since(last.Add(-30 * time.Minute))
	if len(recent) != 360 || !recent[len(recent)-1].Time.Equal(last) || !recent[0].Time.After(last.Add(-30*time.Minute)) {
		t.Fatalf("recent: %d samples, %s to %s", len(recent), recent[0].Time, recent[len(recent)-1].Time)
	}
	if got := s.Since(last); len(got) != 0 {
		t.Fatalf("since the last: %d", len(got))
	}
	h := s.History()
	if len(h) > MaxHistory || len(h) < MaxHistory/2 {
		t.Fatalf("history of %d points", len(h))
	}
	peak := int64(0)
	for i, x := range h {
		peak = max(peak, x.Memory)
		if x.CPU != 50 || (i > 0 && !x.Time.After(h[i-1].Time)) {
			t.Fatalf("point %d: %+v", i, x)
		}
	}
	if peak != 1<<30 || !h[len(h)-1].Time.Equal(last) {
		t.Fatalf("peak %d, last %s", peak, h[len(h)-1].Time)
	}
}
