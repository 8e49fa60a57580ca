package domain

import (
	"slices"
	"time"
)

// Activity kinds a template may count (Idle.Activity). What each measures
// and where is in docs/environments.md, "When an environment is idle".
const (
	// ActivityAPI: POST /v1/environments/{id}/touch (and the clients that
	// touch on the user's behalf). Always counted: it is the spec's touch.
	ActivityAPI = "api"
	// ActivityTunnel: bytes through a tunnel to one of its exports.
	ActivityTunnel = "tunnel"
	// ActivityPreview: requests through one of its preview links.
	ActivityPreview = "preview"
	// ActivityExec: an exec session or a shell open inside it.
	ActivityExec = "exec"
	// ActivityCPU: its CPU use above Idle.CPU.Above over Idle.CPU.Window.
	ActivityCPU = "cpu"
	// ActivityNetwork: bytes through its network boundary (templates with
	// network open or rules).
	ActivityNetwork = "network"
)

// ActivityKinds lists every kind, in the order docs show them.
var ActivityKinds = []string{ActivityAPI, ActivityTunnel, ActivityPreview, ActivityExec, ActivityCPU, ActivityNetwork}

// DefaultActivity is what counts when a template names nothing: what kept
// an environment from going idle before templates could say (touches, and
// the tunnels, previews and exec sessions that touch on the user's behalf).
var DefaultActivity = []string{ActivityAPI, ActivityTunnel, ActivityPreview, ActivityExec}

// Defaults of Idle.CPU.
const (
	DefaultCPUAbove  = 5.0
	DefaultCPUWindow = Duration(time.Minute)
)

// Idle is a template's idle policy: what counts as activity. Whether an
// environment is idle is decided in one place, by the service (package
// timeouts: its idleUntil has passed); the node only moves idleUntil while
// the environment is active. Fields may be added beside Activity (what
// idle does, for one) without changing what is here.
type Idle struct {
	// Activity are the kinds that count (ActivityKinds); empty means
	// DefaultActivity.
	Activity []string `json:"activity,omitempty"`
	// CPU tunes ActivityCPU; absent means its defaults.
	CPU *IdleCPU `json:"cpu,omitempty"`
	// Action is what idleness does: IdleStop (absent: the default, the
	// spec's behaviour) or IdlePause (a verified checkpoint, then state
	// paused, kept Retention, woken on use). The quota of paused
	// environments is Quota.MaxPaused.
	Action string `json:"action,omitempty"`
	// Retention is how long an environment may stay paused before it is
	// deleted with its checkpoint (default DefaultRetention).
	Retention Duration `json:"retention,omitempty"`
}

// IdleCPU says how much CPU is activity: the environment's CPU time over the
// last Window, as a percentage of one CPU, above Above.
type IdleCPU struct {
	Above  float64  `json:"above,omitempty"`
	Window Duration `json:"window,omitempty"`
}

// Counts says whether activity of kind keeps environments of i from idling.
func (i *Idle) Counts(kind string) bool {
	if kind == ActivityAPI {
		return true
	}
	if i == nil || len(i.Activity) == 0 {
		return slices.Contains(DefaultActivity, kind)
	}
	return slices.Contains(i.Activity, kind)
}

// CPUAbove is the percentage of one CPU above which CPU use is activity.
func (i *Idle) CPUAbove() float64 {
	if i == nil || i.CPU == nil || i.CPU.Above <= 0 {
		return DefaultCPUAbove
	}
	return i.CPU.Above
}

// CPUWindow is how long CPU use is averaged over.
func (i *Idle) CPUWindow() time.Duration {
	if i == nil || i.CPU == nil || i.CPU.Window <= 0 {
		return time.Duration(DefaultCPUWindow)
	}
	return time.Duration(i.CPU.Window)
}

// Validate checks the kinds and the CPU settings.
func (i *Idle) Validate() error {
	if i == nil {
		return nil
	}
	for _, k := range i.Activity {
		if !slices.Contains(ActivityKinds, k) {
			return Invalid("idle.activity", "idle.activity: %q is not one of %v", k, ActivityKinds)
		}
	}
	if c := i.CPU; c != nil {
		if c.Above < 0 || c.Above > 100*1024 {
			return Invalid("idle.cpu.above", "idle.cpu.above is a percentage of one CPU, 0 (the default, %g) to 102400", DefaultCPUAbove)
		}
		if c.Window < 0 || (c.Window > 0 && (time.Duration(c.Window) < 10*time.Second || time.Duration(c.Window) > time.Hour)) {
			return Invalid("idle.cpu.window", "idle.cpu.window is 10s to 1h (default %s)", time.Duration(DefaultCPUWindow))
		}
	}
	return nil
}

// ActiveEvery is how often at most a node reports an environment whose idle
// timeout is idle as active while activity goes on: a quarter of it, so a
// busy environment's idle deadline is always at least three quarters of its
// timeout ahead, and a busy node's reports cost one touch per environment
// per quarter of the timeout (docs/performance.md, "Activity reports").
// Never more often than every MinActiveEvery.
func ActiveEvery(idle time.Duration) time.Duration {
	return max(idle/4, MinActiveEvery)
}

// MinActiveEvery bounds how often an environment is reported active.
const MinActiveEvery = 5 * time.Second

// MaxMetricHistory bounds the coarse metrics history kept with an ended
// environment: its whole life in at most this many points.
const MaxMetricHistory = 121

// MetricSample is what an environment used over a few seconds, as its node
// measured it (GET /v1/environments/{id}/metrics; docs/environments.md,
// "Metrics").
type MetricSample struct {
	Time time.Time `json:"time"`
	// CPU is its CPU use since the previous sample, as a percentage of one
	// CPU (200 is two CPUs busy).
	CPU float64 `json:"cpu"`
	// Memory is the memory it holds (bytes): its cgroup's, less the file
	// cache; the resident sets of its processes without a cgroup.
	Memory int64 `json:"memory"`
	// Disk is what it wrote to its disk (bytes), absent when it has no disk
	// of its own to measure.
	Disk *int64 `json:"disk,omitempty"`
	// Processes counts its processes.
	Processes int `json:"processes"`
	// NetIn and NetOut are the bytes per second it received and sent
	// through its network boundary since the previous sample (0 without
	// one).
	NetIn  float64 `json:"netIn"`
	NetOut float64 `json:"netOut"`
}
