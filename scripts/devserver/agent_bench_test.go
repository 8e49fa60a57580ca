package main

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// benchStack runs the local stack for a benchmark and stops it at the end.
func benchStack(b *testing.B) string {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, options{addr: "127.0.0.1:0", sweep: time.Second, out: &out, ready: func(u string) { ready <- u }, containers: true}, apitest.DiscardLogger())
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		b.Fatalf("devserver stopped: %v", err)
	}
	b.Cleanup(func() { cancel(); <-done })
	return base
}

// BenchmarkLeaseToReady measures, through the whole local stack (HTTP API,
// minidyn, the embedded agent), the time from POST /v1/environments until a
// client reading the environment every 5 ms sees it ready, and the service's
// own readyMs (ready - created). cold: the demo's "shell" template starts its
// web server (python3 -m http.server) per lease. warm: "warmweb", the same
// command with warm: 1, is handed a pre-started process. Between iterations
// (untimed) the environment is deleted and, for warm, the pool refills.
// container-cold and container-warm are the same for the demo's container
// templates box and warmbox (busybox httpd under runc, where the devserver
// runs as root with runc), their image cached by an untimed first lease.
// Medians are reported; docs/performance.md records them.
func BenchmarkLeaseToReady(b *testing.B) {
	base := benchStack(b)
	c := api{t: b, base: base, token: apitest.BobToken}
	time.Sleep(1500 * time.Millisecond) // the warm process starts
	cases := []struct{ name, template string }{{"cold", "shell"}, {"warm", "warmweb"}}
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
		cases = append(cases, struct{ name, template string }{"container-cold", "box"}, struct{ name, template string }{"container-warm", "warmbox"})
	} else {
		b.Log("no container templates: the devserver does not run as root with runc")
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c.t = b
			var wall, ready []float64
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
				switch tc.name {
				case "warm":
					time.Sleep(700 * time.Millisecond)
				case "container-warm":
					time.Sleep(1500 * time.Millisecond)
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
