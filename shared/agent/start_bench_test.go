package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/agent/runtimes/process"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// BenchmarkProcessStart measures where a plain process environment's cold
// start goes on this node, confined as the agent confines it (as root: a
// user of its own, a cgroup, network, PID, mount and IPC namespaces):
// prepare (its folder, user id and cgroup), start (the environment's init
// in new namespaces, which starts the command as its user) and the ready
// check (a command without exports: none). It reports the median of each
// and the CPU time of the process and its children per start and stop
// (the environment is stopped and removed between iterations, untimed).
//
//	go test ./shared/agent -run '^$' -bench ProcessStart -benchtime 50x
func BenchmarkProcessStart(b *testing.B) {
	n := &confine.Node{Log: apitest.DiscardLogger()}
	if confine.CanConfine() {
		users, err := confine.NewUIDPool(DefaultUIDRange)
		if err != nil {
			b.Fatal(err)
		}
		n.Users = users
		n.Namespaces = confine.ProbeNamespaces() == nil
		n.Cgroups, _ = confine.CgroupParent()
	}
	dir := b.TempDir()
	// Environments' users must reach their folders through it.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			b.Fatal(err)
		}
	}
	rt := process.New(process.Config{Node: n, WorkDir: dir, Address: "127.0.0.1", Log: apitest.DiscardLogger()})
	if err := os.MkdirAll(filepath.Join(dir, "envs"), 0o711); err != nil {
		b.Fatal(err)
	}
	a := &Agent{cfg: Config{ReadyTimeout: 10 * time.Second}}
	t := domain.Template{Name: "plain", Runtime: domain.RuntimeProcess, Command: []string{"sleep", "3600"}}.Normalized()
	var prep, start, ready []float64
	var cpu time.Duration
	ctx := context.Background()
	for i := range b.N {
		c0 := cpuSelfAndChildren()
		t0 := time.Now()
		h, err := rt.Prepare(ctx, runtimes.Env{ID: fmt.Sprintf("env_bench%d", i), Template: t})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := h.Start(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := a.waitReady(ctx, h, nil); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		b.StopTimer()
		prep = append(prep, float64(t1.Sub(t0).Microseconds())/1000)
		start = append(start, float64(t2.Sub(t1).Microseconds())/1000)
		ready = append(ready, float64(t3.Sub(t2).Microseconds())/1000)
		h.Stop(time.Second)
		h.Remove()
		// The environment's processes are reaped by now, so their CPU
		// counts: a start and its stop.
		cpu += cpuSelfAndChildren() - c0
		b.StartTimer()
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(prep), "prepare-ms")
	b.ReportMetric(med(start), "start-ms")
	b.ReportMetric(med(ready), "ready-check-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/start+stop")
	b.ReportMetric(0, "ns/op")
}

// cpuSelfAndChildren is the CPU time of this process and of its children
// that have been waited for.
func cpuSelfAndChildren() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}
