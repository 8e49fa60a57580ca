package activity

import (
	"testing"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

var t0 = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

func TestTrackerKinds(t *testing.T) {
	cpu := &domain.Idle{Activity: []string{domain.ActivityCPU}, CPU: &domain.IdleCPU{Above: 10, Window: domain.Duration(30 * time.Second)}}
	for _, tc := range []struct {
		name string
		idle *domain.Idle
		feed func(tr *Tracker, at time.Time)
		want bool
	}{
		{"nothing", nil, func(*Tracker, time.Time) {}, false},
		{"tunnel by default", nil, func(tr *Tracker, at time.Time) { tr.Note(domain.ActivityTunnel, at) }, true},
		{"preview by default", nil, func(tr *Tracker, at time.Time) { tr.Note(domain.ActivityPreview, at) }, true},
		{"network not by default", nil, func(tr *Tracker, at time.Time) { tr.Network(at, 10) }, false},
		{"network when named", &domain.Idle{Activity: []string{domain.ActivityNetwork}}, func(tr *Tracker, at time.Time) { tr.Network(at, 10) }, true},
		{"tunnel not when the template names only cpu", cpu, func(tr *Tracker, at time.Time) { tr.Note(domain.ActivityTunnel, at) }, false},
		{"an open exec session", nil, func(tr *Tracker, at time.Time) { tr.ExecOpened(at.Add(-time.Hour)); tr.Due(at.Add(-time.Hour)) }, true},
		{"exec not counted", cpu, func(tr *Tracker, at time.Time) { tr.ExecOpened(at) }, false},
		{"cpu above the threshold", cpu, func(tr *Tracker, at time.Time) {
			tr.CPU(at.Add(-30*time.Second), 100)
			tr.CPU(at, 100+6) // 20% of one CPU over 30 s
		}, true},
		{"cpu below the threshold", cpu, func(tr *Tracker, at time.Time) {
			tr.CPU(at.Add(-30*time.Second), 100)
			tr.CPU(at, 100+1.5) // 5%
		}, false},
		{"a counter that went back starts again", cpu, func(tr *Tracker, at time.Time) {
			tr.CPU(at.Add(-30*time.Second), 100)
			tr.CPU(at, 3)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(tc.idle, 4*time.Minute, time.Time{})
			tc.feed(tr, t0)
			if got := tr.Due(t0); got != tc.want {
				t.Fatalf("due %v, want %v", got, tc.want)
			}
		})
	}
}

// Reports are spaced by a quarter of the idle timeout while activity goes
// on, and stop when it stops; a lost report is made again.
func TestTrackerSpacesItsReports(t *testing.T) {
	tr := New(nil, 4*time.Minute, t0.Add(-time.Minute)) // reports at most every minute
	reports := 0
	for s := 0; s <= 600; s += 5 {
		at := t0.Add(time.Duration(s) * time.Second)
		if s <= 300 {
			tr.Note(domain.ActivityTunnel, at)
		}
		if tr.Due(at) {
			reports++
		}
	}
	// Five minutes of bytes: at 0, 60, 120, 180, 240 and 300 s; none after.
	if reports != 6 {
		t.Fatalf("%d reports, want 6", reports)
	}
	tr.Note(domain.ActivityTunnel, t0.Add(700*time.Second))
	if !tr.Due(t0.Add(700 * time.Second)) {
		t.Fatal("not due after a quiet spell")
	}
	tr.Unreport()
	if !tr.Due(t0.Add(705 * time.Second)) {
		t.Fatal("a lost report is not made again")
	}
}

func TestIdleValidate(t *testing.T) {
	for _, bad := range []*domain.Idle{
		{Activity: []string{"keyboard"}},
		{CPU: &domain.IdleCPU{Above: -1}},
		{CPU: &domain.IdleCPU{Window: domain.Duration(time.Second)}},
		{CPU: &domain.IdleCPU{Window: domain.Duration(2 * time.Hour)}},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	ok := &domain.Idle{Activity: domain.ActivityKinds, CPU: &domain.IdleCPU{Above: 50, Window: domain.Duration(time.Minute)}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The lease moved the idle deadline a whole timeout ahead: the first report
// is a quarter of it after the start, however busy the environment is.
func TestTrackerFirstReportAfterAQuarter(t *testing.T) {
	tr := New(nil, 4*time.Minute, t0)
	tr.Note(domain.ActivityTunnel, t0)
	if tr.Due(t0.Add(59 * time.Second)) {
		t.Fatal("reported before a quarter of the timeout")
	}
	if !tr.Due(t0.Add(time.Minute)) {
		t.Fatal("not reported after a quarter of the timeout")
	}
}
