package main

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// benchSweep is how often the stack's background jobs (timeouts, expiry,
// re-offers, stop re-sends, lost nodes) run in a benchmark: not within it.
// None is needed (a delete reaches the node over the node protocol), and
// each of their runs scans every partition of the store while the measured
// requests wait on it; at one second, and more so as each case left more
// environments behind, the cases run last (the containers) measured the
// store, seconds of it, rather than the node.
const benchSweep = time.Hour

// benchStack runs the local stack for a benchmark and stops it at the end,
// and gives acme's agent of pool local.
func benchStack(b *testing.B) (string, *agent.Agent) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	agents := make(chan *agent.Agent, 1)
	keep := func(org, pool string, a *agent.Agent) {
		if org == "acme" && pool == "local" {
			agents <- a
		}
	}
	go func() {
		done <- run(ctx, options{addr: "127.0.0.1:0", sweep: benchSweep, out: &out, ready: func(u string) { ready <- u }, containers: true, agents: keep}, apitest.DiscardLogger())
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		b.Fatalf("devserver stopped: %v", err)
	}
	b.Cleanup(func() { cancel(); <-done })
	return base, <-agents
}

// waitWarm waits until the agent has a warm environment of the template
// ready to hand out, so that a measured lease never races the pool's
// refill (a lease that finds the pool empty starts cold).
func waitWarm(b *testing.B, a *agent.Agent, template string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for a.WarmReady(template) == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("no warm environment of %s ready", template)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitIdle waits until the agent runs no environment, teardowns included.
func waitIdle(b *testing.B, a *agent.Agent) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for a.Running() > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("the agent still runs %d environments", a.Running())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkLeaseToReady measures, through the whole local stack (HTTP API,
// minidyn, the embedded agent), the time from POST /v1/environments until a
// client reading the environment every 5 ms sees it ready, and the service's
// own readyMs (ready - created). cold: the demo's "shell" template starts its
// web server (python3 -m http.server) per lease. warm: "warmweb", the same
// command with warm: 1, is handed a pre-started process. Between iterations
// (untimed) the environment is deleted and, for warm, the benchmark waits
// until the agent's pool holds a ready one again (WarmReady): a fixed pause
// raced the refill, and a lease that found the pool empty started cold.
// container-cold and container-warm are the same for the demo's container
// templates box and warmbox (busybox httpd under runc, where the devserver
// runs as root with runc), their image cached by an untimed first lease.
// Medians are reported; docs/performance.md records them.
func BenchmarkLeaseToReady(b *testing.B) {
	base, ag := benchStack(b)
	c := api{t: b, base: base, token: apitest.BobToken}
	cases := []struct {
		name, template string
		warm           bool
	}{{"cold", "shell", false}, {"warm", "warmweb", true}}
	var list struct {
		Templates []domain.Template `json:"templates"`
	}
	c.do("GET", "/v1/templates", nil, &list)
	if slices.ContainsFunc(list.Templates, func(t domain.Template) bool { return t.Name == "box" }) {
		// The image is pulled and unpacked once, untimed.
		var leased envAnswer
		if s := c.do("POST", "/v1/environments", map[string]any{"template": "box"}, &leased); s != 201 {
			b.Fatalf("lease box: %d", s)
		}
		c.waitState(leased.Environment.ID, domain.StateReady, 2*time.Minute)
		c.do("DELETE", "/v1/environments/"+leased.Environment.ID, nil, nil)
		c.waitState(leased.Environment.ID, domain.StateStopped, time.Minute)
		cases = append(cases, struct {
			name, template string
			warm           bool
		}{"container-cold", "box", false}, struct {
			name, template string
			warm           bool
		}{"container-warm", "warmbox", true})
	} else {
		b.Log("no container templates: the devserver does not run as root with runc")
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c.t = b
			var wall, ready []float64
			if tc.warm {
				b.StopTimer()
				waitWarm(b, ag, tc.template)
				b.StartTimer()
			}
			for b.Loop() {
				start := time.Now()
				var leased envAnswer
				if s := c.do("POST", "/v1/environments", map[string]any{"template": tc.template}, &leased); s != 201 {
					b.Fatalf("lease: %d", s)
				}
				var e domain.Environment
				for {
					e = domain.Environment{}
					c.do("GET", "/v1/environments/"+leased.Environment.ID, nil, &e)
					if e.State == domain.StateReady {
						break
					}
					if !e.State.Live() {
						b.Fatalf("%s: %q", e.State, e.Error)
					}
					time.Sleep(5 * time.Millisecond)
				}
				wall = append(wall, float64(time.Since(start).Microseconds())/1000)
				ready = append(ready, float64(*e.ReadyMs))
				b.StopTimer()
				c.do("DELETE", "/v1/environments/"+e.ID, nil, nil)
				c.waitState(e.ID, domain.StateStopped, 15*time.Second)
				// The last environment's teardown (for a container, runc
				// delete, its overlay and folder) is over before the next
				// lease, which would otherwise share the node with it.
				waitIdle(b, ag)
				if tc.warm {
					waitWarm(b, ag, tc.template)
				}
				b.StartTimer()
			}
			b.ReportMetric(median(wall), "ms-to-ready-median")
			b.ReportMetric(median(ready), "readyMs-median")
		})
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
