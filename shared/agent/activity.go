package agent

import (
	"context"
	"net"
	"time"

	"github.com/envlease/envlease/shared/agent/activity"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/agent/samples"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// What the node measures of its environments (docs/environments.md, "When
// an environment is idle" and "Metrics"): every SampleEvery the agent reads
// each environment's usage from its runtime (its cgroup, or /proc of its
// process tree) and its network boundary's bytes, keeps them as metrics,
// and feeds its activity tracker; tunnels, previews and exec sessions feed
// the tracker as they carry bytes. A heartbeat names the environments whose
// tracker is due (activity.Tracker.Due): the service moves their idle
// deadlines as a touch would.

// DefaultSampleEvery is Config.SampleEvery when it is not set.
const DefaultSampleEvery = 5 * time.Second

// now is the agent's clock (Config.Now).
func (a *Agent) now() time.Time {
	if a.cfg.Now != nil {
		return a.cfg.Now()
	}
	return time.Now()
}

// measured is what the agent keeps of one environment's use.
type measured struct {
	act    *activity.Tracker
	series *samples.Series
	// prev is the previous reading, for rates.
	prev     runtimes.Usage
	prevNet  [2]int64
	prevAt   time.Time
	hasPrev  bool
	lastSeen string // the usage's source, for the log once
}

func newMeasured(c *nodes.Claimed, now time.Time) *measured {
	return &measured{act: activity.New(c.Template.Idle, time.Duration(c.Environment.Idle), now), series: samples.New()}
}

// activeEnvs are the environments to report active in this heartbeat.
func (a *Agent) activeEnvs() []string {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id, r := range a.envs {
		if r.m != nil && r.m.act.Due(now) {
			out = append(out, id)
		}
	}
	return out
}

// unreport puts back the activity of a heartbeat that failed.
func (a *Agent) unreport(ids []string) {
	for _, id := range ids {
		if r := a.env(id); r != nil && r.m != nil {
			r.m.act.Unreport()
		}
	}
}

// note records activity of kind for environment id.
func (a *Agent) note(id, kind string) {
	if r := a.env(id); r != nil && r.m != nil {
		r.m.act.Note(kind, a.now())
	}
}

// dialCounted is dialTarget whose connections note activity of kind for
// their environment as bytes pass, either way.
func (a *Agent) dialCounted(kind string) func(ctx context.Context, env, target string) (net.Conn, error) {
	return func(ctx context.Context, env, target string) (net.Conn, error) {
		c, err := a.dialTarget(ctx, env, target)
		if err != nil {
			return nil, err
		}
		r := a.env(env)
		if r == nil || r.m == nil || !r.m.act.Counts(kind) {
			return c, nil
		}
		return &notingConn{Conn: c, note: func() { r.m.act.Note(kind, a.now()) }}, nil
	}
}

// notingConn notes activity on every read and write that moved bytes.
type notingConn struct {
	net.Conn
	note func()
}

func (c *notingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.note()
	}
	return n, err
}

func (c *notingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.note()
	}
	return n, err
}

// CloseWrite keeps half-closes working through the wrapper.
func (c *notingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// sampleLoop samples every environment every SampleEvery until ctx ends.
func (a *Agent) sampleLoop(ctx context.Context) {
	every := a.cfg.SampleEvery
	if every <= 0 {
		every = DefaultSampleEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.sampleAll(ctx)
	}
}

// sampleAll samples each environment once.
func (a *Agent) sampleAll(ctx context.Context) {
	a.mu.Lock()
	envs := make([]*runningEnv, 0, len(a.envs))
	for _, r := range a.envs {
		envs = append(envs, r)
	}
	a.mu.Unlock()
	for _, r := range envs {
		a.sample(ctx, r)
	}
}

// sample reads one environment's usage and network bytes, keeps the sample
// and feeds its activity tracker.
func (a *Agent) sample(ctx context.Context, r *runningEnv) {
	hp := r.h.Load()
	if hp == nil || r.m == nil {
		return
	}
	s, ok := (*hp).(runtimes.Sampler)
	if !ok {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	u, err := s.Sample(sctx)
	cancel()
	if err != nil {
		return // ended, or not started: the next sample tells
	}
	now := a.now()
	sent, received := a.boundaryBytes(r.id)
	m := r.m
	if m.lastSeen != u.Source {
		m.lastSeen = u.Source
		a.log.Debug("environment usage read", "environment", r.id, "from", u.Source)
	}
	m.act.CPU(now, u.CPUSeconds)
	m.act.Network(now, sent+received)
	x := domain.MetricSample{Time: now.UTC(), Memory: u.MemoryBytes, Processes: u.Processes}
	if u.DiskBytes >= 0 {
		d := u.DiskBytes
		x.Disk = &d
	}
	if m.hasPrev {
		if dt := now.Sub(m.prevAt).Seconds(); dt > 0 {
			x.CPU = max(100*(u.CPUSeconds-m.prev.CPUSeconds)/dt, 0)
			x.NetOut = max(float64(sent-m.prevNet[0])/dt, 0)
			x.NetIn = max(float64(received-m.prevNet[1])/dt, 0)
		}
	}
	m.prev, m.prevNet, m.prevAt, m.hasPrev = u, [2]int64{sent, received}, now, true
	m.series.Add(x)
}

// boundaryBytes are the bytes environment id sent and received through
// its network boundary, zero without one.
func (a *Agent) boundaryBytes(id string) (sent, received int64) {
	a.boundaries.mu.Lock()
	e := a.boundaries.byID[id]
	a.boundaries.mu.Unlock()
	if e == nil || e.b == nil {
		return 0, 0
	}
	return e.b.Bytes()
}

// history is the coarse metrics history of environment id, for its end's
// report; nil when none was sampled.
func (a *Agent) history(id string) []domain.MetricSample {
	r := a.env(id)
	if r == nil || r.m == nil {
		return nil
	}
	h := r.m.series.History()
	if len(h) == 0 {
		return nil
	}
	return h
}

// envSeries is the metrics series of an environment the agent runs.
func (a *Agent) envSeries(id string) (*samples.Series, bool) {
	r := a.env(id)
	if r == nil || r.m == nil {
		return nil, false
	}
	return r.m.series, true
}
