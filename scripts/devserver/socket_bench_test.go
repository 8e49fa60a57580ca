package main

import (
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// BenchmarkLeaseToClaimed measures, through the whole local stack, the time
// from POST /v1/environments until a client reading the environment every
// millisecond sees it leave pending: the lease wakes the pool's node over
// the node protocol, which claims it. Between iterations (untimed) the
// environment is deleted and stopped. The median is reported; docs/nodes.md
// (Figures) records it.
func BenchmarkLeaseToClaimed(b *testing.B) {
	base, _ := benchStack(b)
	c := api{t: b, base: base, token: apitest.BobToken}
	time.Sleep(1500 * time.Millisecond) // the agents connect
	var claimed []float64
	for b.Loop() {
		start := time.Now()
		var leased envAnswer
		if s := c.do("POST", "/v1/environments", map[string]any{"template": "sleeper"}, &leased); s != 201 {
			b.Fatalf("lease: %d", s)
		}
		for {
			var e domain.Environment
			c.do("GET", "/v1/environments/"+leased.Environment.ID, nil, &e)
			if e.State != domain.StatePending {
				break
			}
			time.Sleep(time.Millisecond)
		}
		claimed = append(claimed, float64(time.Since(start).Microseconds())/1000)
		b.StopTimer()
		c.do("DELETE", "/v1/environments/"+leased.Environment.ID, nil, nil)
		c.waitState(leased.Environment.ID, domain.StateStopped, 15*time.Second)
		b.StartTimer()
	}
	b.ReportMetric(median(claimed), "ms-to-claimed-median")
}
