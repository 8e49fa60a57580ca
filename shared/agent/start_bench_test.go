package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// and the CPU time per start: the agent's and every process it started,
// until ready (treeCPU). The environment is stopped and removed between
// iterations, untimed.
//
//	go test ./shared/agent -run '^$' -bench ProcessStart/one -benchtime 50x
//
// crowd starts 100 at once (-benchtime 3x), as a node does for a crowd it
// claimed together, and reports the wall time beside the floor its cores
// put under it.
//
// disk starts one at a time with a disk of its own as well (as the agent
// bounds disks as root: mkfs.ext4, a loop device, the mount), made by the
// start; prepared takes a box made ahead instead (confine.PreparedBoxes:
// the user id, the folder and the disk made between starts, untimed and not
// counted in its CPU), as a cold start of the agent does when its pool
// holds one:
//
//	go test ./shared/agent -run '^$' -bench 'ProcessStart/(disk|prepared)' -benchtime 20x
func BenchmarkProcessStart(b *testing.B) {
	t := domain.Template{Name: "plain", Runtime: domain.RuntimeProcess, Command: []string{"sleep", "3600"}}.Normalized()
	b.Run("one", func(b *testing.B) {
		rt, a, _ := startBenchRuntime(b, false, 0)
		benchStartOne(b, rt, a, t, nil)
	})
	b.Run("crowd", func(b *testing.B) {
		rt, a, _ := startBenchRuntime(b, false, 0)
		benchStartCrowd(b, rt, a, t, 100)
	})
	b.Run("disk", func(b *testing.B) {
		rt, a, _ := startBenchRuntime(b, true, 0)
		benchStartOne(b, rt, a, t, nil)
	})
	b.Run("prepared", func(b *testing.B) {
		rt, a, pool := startBenchRuntime(b, true, 1)
		if pool == nil {
			b.Skip("boxes are made ahead only as root")
		}
		benchStartOne(b, rt, a, t, func() {
			pool.Fill()
			for pool.Ready() == 0 {
				time.Sleep(time.Millisecond)
			}
		})
	})
}

// startBenchRuntime is the process runtime confined as the agent confines
// it on this node; with disks, each environment gets a disk of its own of
// the default size, and with prepared > 0 the node keeps that many boxes
// made ahead (returned, nil without).
func startBenchRuntime(b *testing.B, disks bool, prepared int) (*process.Runtime, *Agent, *confine.PreparedBoxes) {
	n := &confine.Node{Log: apitest.DiscardLogger()}
	dir := b.TempDir()
	var pool *confine.PreparedBoxes
	if confine.CanConfine() {
		users, err := confine.NewUIDPool(DefaultUIDRange)
		if err != nil {
			b.Fatal(err)
		}
		n.Users = users
		n.Namespaces = confine.ProbeNamespaces() == nil
		n.Cgroups, _ = confine.CgroupParent()
		if disks {
			if n.Disks, err = confine.NewDisks(filepath.Join(dir, "disks"), 0, 0); err != nil {
				b.Skip(err)
			}
		}
		if prepared > 0 {
			var size confine.DiskSize
			if n.Disks != nil {
				size, _ = n.Disks.Size("")
			}
			pool = n.Prepare(filepath.Join(dir, "prepared"), size, prepared)
			b.Cleanup(pool.Close)
		}
	}
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
	return rt, &Agent{cfg: Config{ReadyTimeout: 10 * time.Second}}, pool
}

// benchStartOne starts one environment at a time; before is run before
// each start, untimed.
func benchStartOne(b *testing.B, rt *process.Runtime, a *Agent, t domain.Template, before func()) {
	var prep, start, ready []float64
	var cpu time.Duration
	ctx := context.Background()
	for i := range b.N {
		if before != nil {
			b.StopTimer()
			before()
			b.StartTimer()
		}
		c0 := treeCPU()
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
		cpu += treeCPU() - c0 - treeCPUCost()
		prep = append(prep, float64(t1.Sub(t0).Microseconds())/1000)
		start = append(start, float64(t2.Sub(t1).Microseconds())/1000)
		ready = append(ready, float64(t3.Sub(t2).Microseconds())/1000)
		h.Stop(time.Second)
		h.Remove()
		b.StartTimer()
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(prep), "prepare-ms")
	b.ReportMetric(med(start), "start-ms")
	b.ReportMetric(med(ready), "ready-check-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/start")
	b.ReportMetric(0, "ns/op")
}

// treeCPU is the CPU time of this process, of its children waited for,
// and of every live process descending from it (an environment's init and
// its command), from /proc.
func treeCPU() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	total := tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
	type proc struct {
		ppid int
		cpu  time.Duration
	}
	procs := map[int]proc{}
	for _, pid := range confine.Pids() {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		// After the command: state, ppid, …, utime (14th field), stime
		// (15th), in clock ticks of 10 ms (the fallback).
		f := strings.Fields(string(raw[i+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu := time.Duration(u+st) * 10 * time.Millisecond
		// schedstat's first field is the time on a CPU in nanoseconds:
		// a start's processes take a few milliseconds, below the ticks.
		if ss, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
			if g := strings.Fields(string(ss)); len(g) > 0 {
				if ns, err := strconv.ParseInt(g[0], 10, 64); err == nil {
					cpu = time.Duration(ns)
				}
			}
		}
		procs[pid] = proc{ppid: ppid, cpu: cpu}
	}
	me := os.Getpid()
	for pid, p := range procs {
		for q, hops := p.ppid, 0; q > 1 && hops < 64; q, hops = procs[q].ppid, hops+1 {
			if q == me {
				total += p.cpu
				break
			}
		}
		_ = pid
	}
	return total
}

// treeCPUCost is what one treeCPU costs this process (it reads every
// process's stat), taken off what a measurement counts.
func treeCPUCost() time.Duration {
	c0 := treeCPU()
	return treeCPU() - c0
}

// benchStartCrowd starts n environments at once, as a node does for a crowd
// claimed together, and reports the wall time until every one is ready
// beside the floor the node's cores put under it: the CPU time of all the
// starts divided by the cores.
func benchStartCrowd(b *testing.B, rt *process.Runtime, a *Agent, t domain.Template, n int) {
	ctx := context.Background()
	var wall, cpu time.Duration
	for i := range b.N {
		c0 := treeCPU()
		t0 := time.Now()
		hs := make([]runtimes.Handle, n)
		errs := make(chan error, n)
		for j := range hs {
			go func() {
				h, err := rt.Prepare(ctx, runtimes.Env{ID: fmt.Sprintf("env_crowd%d_%d", i, j), Template: t})
				if err == nil {
					hs[j] = h
					if err = h.Start(ctx); err == nil {
						err = a.waitReady(ctx, h, nil)
					}
				}
				errs <- err
			}()
		}
		for range hs {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		wall += time.Since(t0)
		b.StopTimer()
		cpu += treeCPU() - c0 - treeCPUCost()
		var wg sync.WaitGroup
		for _, h := range hs {
			wg.Add(1)
			go func() { defer wg.Done(); h.Stop(time.Second); h.Remove() }()
		}
		wg.Wait()
		b.StartTimer()
	}
	floor := cpu / time.Duration(b.N) / time.Duration(runtime.NumCPU())
	b.ReportMetric(float64(wall.Microseconds())/1000/float64(b.N), "wall-ms")
	b.ReportMetric(float64(floor.Microseconds())/1000, "cpu-floor-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N*n), "cpu-ms/start")
	b.ReportMetric(0, "ns/op")
}
