// Package activity is what a node measures of an environment's activity and
// when it tells the service (docs/environments.md, "When an environment is
// idle"). The node never decides that an environment is idle: the service
// does, in one place (package timeouts, when its idleUntil has passed). The
// node only reports an environment as active, which moves idleUntil as a
// touch would, and reports it at most every domain.ActiveEvery of its idle
// timeout while the activity goes on, so a busy node costs one touch per
// environment per quarter of its idle timeout.
package activity

import (
	"sync"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Tracker is one environment's activity. Its methods are safe for
// concurrent use; times are the caller's (an injectable clock).
type Tracker struct {
	idle  *domain.Idle
	every time.Duration

	mu sync.Mutex
	// pending: activity came since the last report.
	pending bool
	// reported is when the environment was last reported active, or
	// started: its lease set its idle deadline a whole timeout ahead, so
	// the first report is due a quarter of it after the start.
	reported time.Time
	// execs counts the exec sessions and shells open now.
	execs int
	// cpu are the CPU samples of the last window, oldest first, plus the
	// newest one older than the window (the anchor of the average).
	cpu []cpuSample
	// busyCPU: the last CPU average was above the threshold.
	busyCPU bool
	// net is the boundary's byte count last seen.
	net int64
	// last is when activity of each kind was last seen, for metrics and
	// the agent's log.
	last map[string]time.Time
}

type cpuSample struct {
	at      time.Time
	seconds float64
}

// New tracks an environment of a template with idle policy idle (nil: the
// default) and idle timeout timeout, from its start (its claim, a moment
// after its lease moved its idle deadline; zero: report at once).
func New(idle *domain.Idle, timeout time.Duration, start time.Time) *Tracker {
	return &Tracker{idle: idle, every: domain.ActiveEvery(timeout), reported: start, last: map[string]time.Time{}}
}

// Counts says whether kind keeps this environment from idling.
func (t *Tracker) Counts(kind string) bool { return t.idle.Counts(kind) }

// Note records activity of kind (a tunnel's bytes, a preview's request) at
// now; a kind the template does not count is ignored.
func (t *Tracker) Note(kind string, now time.Time) {
	if !t.idle.Counts(kind) {
		return
	}
	t.mu.Lock()
	t.pending = true
	t.last[kind] = now
	t.mu.Unlock()
}

// ExecOpened records an exec session or shell opening; ExecClosed its end.
// While one is open the environment is active (when exec counts).
func (t *Tracker) ExecOpened(now time.Time) {
	t.mu.Lock()
	t.execs++
	t.last[domain.ActivityExec] = now
	t.mu.Unlock()
}

// ExecClosed records the end of a session ExecOpened recorded: its last
// moments count as activity.
func (t *Tracker) ExecClosed(now time.Time) {
	t.mu.Lock()
	t.execs = max(t.execs-1, 0)
	t.last[domain.ActivityExec] = now
	if t.idle.Counts(domain.ActivityExec) {
		t.pending = true
	}
	t.mu.Unlock()
}

// CPU records the environment's CPU time used so far (seconds, a counter)
// at now, and says its average over the window as a percentage of one CPU
// (-1 until two samples span some time). Above the template's threshold it
// is activity, when cpu counts.
func (t *Tracker) CPU(now time.Time, seconds float64) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.cpu); n > 0 && (seconds < t.cpu[n-1].seconds || !now.After(t.cpu[n-1].at)) {
		// A counter that went back (a new cgroup, a process tree that lost
		// a member before it was reaped) or a clock that did not move:
		// start the window again.
		t.cpu = t.cpu[:0]
	}
	t.cpu = append(t.cpu, cpuSample{now, seconds})
	// Keep one sample at or before the window's start as the anchor.
	from := now.Add(-t.idle.CPUWindow())
	drop := 0
	for drop+1 < len(t.cpu) && !t.cpu[drop+1].at.After(from) {
		drop++
	}
	t.cpu = append(t.cpu[:0], t.cpu[drop:]...)
	if len(t.cpu) < 2 {
		t.busyCPU = false
		return -1
	}
	first := t.cpu[0]
	pct := 100 * (seconds - first.seconds) / now.Sub(first.at).Seconds()
	t.busyCPU = pct > t.idle.CPUAbove()
	if t.busyCPU {
		t.last[domain.ActivityCPU] = now
		if t.idle.Counts(domain.ActivityCPU) {
			t.pending = true
		}
	}
	return pct
}

// Network records the bytes through the environment's network boundary so
// far (a counter) at now: any growth is activity, when network counts.
func (t *Tracker) Network(now time.Time, bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if bytes > t.net {
		t.last[domain.ActivityNetwork] = now
		if t.idle.Counts(domain.ActivityNetwork) {
			t.pending = true
		}
	}
	t.net = bytes
}

// Due says whether the environment is to be reported active now, and if so
// takes it as reported: activity came since the last report (or goes on:
// an exec session open, CPU above the threshold) and the last report is at
// least a quarter of the idle timeout old.
func (t *Tracker) Due(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	active := t.pending || (t.execs > 0 && t.idle.Counts(domain.ActivityExec)) ||
		(t.busyCPU && t.idle.Counts(domain.ActivityCPU))
	if !active || now.Sub(t.reported) < t.every {
		return false
	}
	t.pending = false
	t.reported = now
	return true
}

// Unreport undoes a Due whose report was lost (a heartbeat that failed):
// the next Due reports again.
func (t *Tracker) Unreport() {
	t.mu.Lock()
	t.pending = true
	t.reported = t.reported.Add(-t.every)
	t.mu.Unlock()
}

// Last is when activity of each kind was last seen (counted or not).
func (t *Tracker) Last() map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(t.last))
	for k, v := range t.last {
		out[k] = v
	}
	return out
}
