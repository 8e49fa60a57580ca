// Package samples keeps what a node measured of an environment's use: the
// recent samples at full resolution, for live metrics, and a coarse history
// of its whole life in a bounded number of points, kept with the
// environment once it ended (docs/environments.md, "Metrics").
package samples

import (
	"slices"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Series is one environment's samples.
type Series struct {
	mu     sync.Mutex
	recent []domain.MetricSample // a ring of at most maxRecent
	next   int
	hist   []point
	span   int // samples per history point, doubled when full
	// part is the point being filled.
	part point
}

type point struct {
	s domain.MetricSample
	n int
}

// Bounds: 360 recent samples are 30 minutes at 5 s; 120 history points
// cover any life, each point of twice the samples once the history is
// full.
const (
	maxRecent  = 360
	maxHistory = 120
)

// New makes an empty series.
func New() *Series { return &Series{span: 1} }

// Add records one sample.
func (s *Series) Add(x domain.MetricSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recent) < maxRecent {
		s.recent = append(s.recent, x)
	} else {
		s.recent[s.next] = x
		s.next = (s.next + 1) % maxRecent
	}
	s.part = merge(s.part, point{x, 1})
	if s.part.n < s.span {
		return
	}
	s.hist = append(s.hist, s.part)
	s.part = point{}
	if len(s.hist) == maxHistory {
		// Halve the resolution: each pair becomes one point.
		out := s.hist[:0]
		for i := 0; i+1 < len(s.hist); i += 2 {
			out = append(out, merge(s.hist[i], s.hist[i+1]))
		}
		s.hist = out
		s.span *= 2
	}
}

// merge averages rates and levels, weighted by their samples, keeping the
// later time, and the larger of the process counts and of memory (a peak is
// what a coarse view must not hide).
func merge(a, b point) point {
	if a.n == 0 {
		return b
	}
	n := a.n + b.n
	w := func(x, y float64) float64 { return (x*float64(a.n) + y*float64(b.n)) / float64(n) }
	out := point{n: n, s: domain.MetricSample{
		Time: b.s.Time, CPU: w(a.s.CPU, b.s.CPU), Memory: max(a.s.Memory, b.s.Memory),
		Processes: max(a.s.Processes, b.s.Processes), NetIn: w(a.s.NetIn, b.s.NetIn), NetOut: w(a.s.NetOut, b.s.NetOut),
		Disk: b.s.Disk,
	}}
	if out.s.Disk == nil {
		out.s.Disk = a.s.Disk
	}
	return out
}

// Since are the recent samples after t, oldest first.
func (s *Series) Since(t time.Time) []domain.MetricSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := append(slices.Clone(s.recent[s.next:]), s.recent[:s.next]...)
	i, _ := slices.BinarySearchFunc(all, t, func(x domain.MetricSample, t time.Time) int {
		if x.Time.After(t) {
			return 1
		}
		return -1
	})
	return all[i:]
}

// History is the coarse history of its whole life: at most maxHistory
// points, oldest first, the last one partial.
func (s *Series) History() []domain.MetricSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]domain.MetricSample, 0, len(s.hist)+1)
	for _, p := range s.hist {
		out = append(out, p.s)
	}
	if s.part.n > 0 {
		out = append(out, s.part.s)
	}
	return out
}

// MaxHistory is the most points History gives.
const MaxHistory = domain.MaxMetricHistory

var _ = [1]int{}[MaxHistory-(maxHistory+1)] // History's bound is the service's
