package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/execsession"
	"github.com/envlease/envlease/shared/fixture"
)

// crowdRuns is how many runs each mode makes (ENVLEASE_CROWD_RUNS, 100 by
// default): the field's harness makes 100 per mode.
func crowdRuns() int {
	if n, err := strconv.Atoi(os.Getenv("ENVLEASE_CROWD_RUNS")); err == nil && n > 0 {
		return n
	}
	return 100
}

// crowdStagger is the staggered mode's pace: one run started every 200 ms.
const crowdStagger = 200 * time.Millisecond

// crowdTemplate adds the benchmark's template to acme: a plain command that
// keeps running and has no exports, of the runtime, with a warm pool of warm
// (the whole crowd, or none), and a quota that lets the whole crowd live at
// once. A container uses the demo's busybox image (containerDemo), when
// this machine runs containers. One template a stack: another's warm pool
// would start beside the measured one, and every container of a node counts
// against one kernel key quota (docs/performance.md, A crowd at once).
func crowdTemplate(name, runtime string, warm, runs int) func(*fixture.File) {
	return func(f *fixture.File) {
		for i := range f.Orgs {
			if f.Orgs[i].ID != "acme" {
				continue
			}
			var image *domain.Image
			for _, t := range f.Orgs[i].Templates {
				if t.Name == "box" {
					image = t.Image
				}
			}
			t := domain.Template{
				Name: name, Description: "a command that keeps running, without exports",
				Pools: []string{"local"}, Restart: "never", Warm: warm, Runtime: runtime,
				Timeouts: domain.Timeouts{Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(time.Hour)},
				Quota:    domain.Quota{MaxLeases: 4 * runs},
				Exports:  map[string]domain.Export{}, Shares: []domain.TemplateShare{},
				Command: []string{"sleep", "3600"},
			}
			if runtime == domain.RuntimeContainer {
				if image == nil {
					return // no containers here: the benchmark skips
				}
				// PID 1 of the container ends on SIGTERM (trap), so a delete
				// does not wait out the grace period.
				t.Image, t.Workdir = image, "/work"
				t.Command = []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}
				t.Resources = domain.Resources{CPUs: 1, Memory: "64Mi", PIDs: 32}
			}
			f.Orgs[i].Templates = append(f.Orgs[i].Templates, t)
		}
	}
}

// crowdResult is one run: its steps' durations and how it ended.
type crowdResult struct {
	// lease: POST /v1/environments answered; ready: the wait for ready
	// answered; ticket: POST …/exec answered; command: the agent's
	// endpoint dialled, the command run, its exit code received.
	lease, ready, ticket, command time.Duration
	total                         time.Duration
	readyMs                       float64
	id                            string
	err                           error
}

var crowdSteps = []string{"lease", "ready", "ticket", "command"}

func (r crowdResult) step(name string) time.Duration {
	switch name {
	case "lease":
		return r.lease
	case "ready":
		return r.ready
	case "ticket":
		return r.ticket
	}
	return r.command
}

// crowdRun is one run as the field's harness measures it: from the Go
// client's create call until a first command run inside the environment
// (through the client's own exec) has exited.
func crowdRun(ctx context.Context, c *client.Client, template string) (r crowdResult) {
	start := time.Now()
	mark := start
	lap := func() time.Duration {
		now := time.Now()
		d := now.Sub(mark)
		mark = now
		return d
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{Template: template})
	if err != nil {
		r.err = fmt.Errorf("lease: %w", err)
		return r
	}
	r.id, r.lease = leased.Environment.ID, lap()
	e := leased.Environment
	for e.State == domain.StatePending || e.State == domain.StateStarting {
		if e, err = c.WaitReady(ctx, r.id, client.MaxWait); err != nil {
			r.err = fmt.Errorf("wait: %w", err)
			return r
		}
	}
	if e.State != domain.StateReady {
		r.err = fmt.Errorf("%s: %s %s", r.id, e.State, e.Error)
		return r
	}
	r.ready = lap()
	if e.Ready != nil {
		r.readyMs = ms(e.Ready.Sub(e.Created))
	}
	tk, err := c.CreateExec(ctx, r.id, client.ExecRequest{Command: []string{"true"}})
	if err != nil {
		r.err = fmt.Errorf("exec ticket: %w", err)
		return r
	}
	r.ticket = lap()
	code, err := execsession.Run(ctx, tk.URL, tk.Ticket, execsession.Options{Command: []string{"true"}})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		r.err = fmt.Errorf("exec: %w", err)
		return r
	}
	r.command = lap()
	r.total = time.Since(start)
	return r
}

// crowdMode runs n runs of template in one of the field's three modes.
func crowdMode(ctx context.Context, c *client.Client, mode, template string, n int) []crowdResult {
	out := make([]crowdResult, n)
	switch mode {
	case "serial":
		for i := range out {
			out[i] = crowdRun(ctx, c, template)
		}
		return out
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			if mode == "staggered" {
				time.Sleep(time.Duration(i) * crowdStagger)
			}
			out[i] = crowdRun(ctx, c, template)
		}()
	}
	close(gate)
	wg.Wait()
	return out
}

// cpuTime is the CPU time spent so far by this process (the whole stack:
// API, agent, minidyn), by its children that have ended (environments,
// runc), and by those still running (DynamoDB Local, versitygw).
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	total := tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
	me := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state, ppid, …,
		// utime (14th field) and stime (15th), in clock ticks (100 a second).
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 || f[1] != me {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+s) * 10 * time.Millisecond
	}
	return total
}

// machineBusy is the CPU time every core of the machine spent busy so far
// (/proc/stat: user, nice, system, irq, softirq and steal), whoever it was
// for. On a quiet machine its growth over a crowd is what the crowd cost in
// all: cpuTime misses what the environments' own commands spent (the
// grandchildren, such as each run's `true`) and the kernel's threads
// (loop devices, mounts, writeback).
func machineBusy() time.Duration {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// BenchmarkCrowd measures what the field's sandbox harness measures: from
// the Go client's create call (POST /v1/environments) until a first
// command (`true`) run inside the environment through the client's own
// exec has exited, 100 runs in each of three modes: serial (one at a time),
// staggered (one started every 200 ms) and burst (100 at once); for the
// process and the container runtime, warm (a pool as large as the crowd)
// and cold. The stack is the dev server in process (HTTP API, the test
// pass's DynamoDB: ENVLEASE_TEST_DYNAMO=minidyn or dynamodb-local,
// versitygw, one node agent with room for the crowd). Between modes
// (untimed) every environment is deleted, the agent runs nothing and the
// warm pool is full again. Run with -benchtime 1x; it prints, per mode,
// median, p95 and p99, failures, each step's share, readyMs and the CPU
// time of the stack per run; docs/performance.md records them.
func BenchmarkCrowd(b *testing.B) {
	runs := crowdRuns()
	for _, rt := range []string{domain.RuntimeProcess, domain.RuntimeContainer} {
		for _, start := range []struct {
			name string
			warm int
		}{{"warm", runs}, {"cold", 0}} {
			b.Run(rt+"/"+start.name, func(b *testing.B) {
				const template = "crowd"
				base, ag := crowdStack(b, runs, crowdTemplate(template, rt, start.warm, runs))
				hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * runs}}
				c, err := client.New(base, apitest.BobToken, client.WithHTTPClient(hc))
				if err != nil {
					b.Fatal(err)
				}
				list, err := c.Templates(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if !slices.ContainsFunc(list.Templates, func(t domain.Template) bool { return t.Name == template }) {
					b.Skipf("no %s template: the dev server does not run as root with runc", rt)
				}
				if rt == domain.RuntimeContainer {
					roomForKeys(b, 4*runs)
				}
				for _, mode := range []string{"serial", "staggered", "burst"} {
					b.Run(mode, func(b *testing.B) {
						for range b.N {
							b.StopTimer()
							crowdSettle(b, c, ag, template, start.warm, nil)
							load := loadAvg()
							cpu0, busy0 := cpuTime(), machineBusy()
							stopProfile := crowdProfile(b, rt+"-"+start.name+"-"+mode)
							b.StartTimer()
							res := crowdMode(context.Background(), c, mode, template, runs)
							b.StopTimer()
							stopProfile()
							cpu, busy := cpuTime()-cpu0, machineBusy()-busy0
							crowdReport(b, res, cpu, busy, load)
							crowdSettle(b, c, ag, template, start.warm, res)
							b.StartTimer()
						}
					})
				}
				if rt == domain.RuntimeProcess && start.warm > 0 {
					b.Run("cli", func(b *testing.B) {
						for range b.N {
							crowdCLI(b, base, ag, template, runs)
						}
					})
				}
			})
		}
	}
}

// crowdProfile writes a CPU profile of the stack's process for one mode's
// runs alone (the settling between modes left out) to
// $ENVLEASE_CROWD_CPUPROFILE-<name>.prof, when that is set; go test's own
// -cpuprofile must then be off, as one process has one profiler.
func crowdProfile(b *testing.B, name string) func() {
	base := os.Getenv("ENVLEASE_CROWD_CPUPROFILE")
	if base == "" {
		return func() {}
	}
	f, err := os.Create(base + "-" + strings.ReplaceAll(name, "/", "-") + ".prof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// crowdCLI is the serial mode through the CLI, as a person measures it:
// `envlease lease -t T --wait -o json`, then `envlease exec ID -- true`,
// each a process of its own (their start included), the delete untimed.
func crowdCLI(b *testing.B, base string, ag *agent.Agent, template string, runs int) {
	b.StopTimer()
	bin := filepath.Join(b.TempDir(), "envlease")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/envlease/envlease/scripts/envlease").CombinedOutput(); err != nil {
		b.Fatalf("go build envlease: %v\n%s", err, out)
	}
	home := b.TempDir()
	cli := func(stdin string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = home
		cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
		cmd.Stdin = strings.NewReader(stdin)
		return cmd
	}
	if out, err := cli(apitest.BobToken+"\n", "login", "--url", base).CombinedOutput(); err != nil {
		b.Fatalf("login: %v\n%s", err, out)
	}
	hc, _ := client.New(base, apitest.BobToken)
	res := make([]crowdResult, 0, runs)
	crowdSettle(b, hc, ag, template, runs, nil)
	load := loadAvg()
	cpu0, busy0 := cpuTime(), machineBusy()
	for range runs {
		b.StartTimer()
		start := time.Now()
		out, err := cli("", "lease", "-t", template, "--wait", "-o", "json").Output()
		leased := time.Now()
		var r crowdResult
		var got struct {
			Environment domain.Environment `json:"environment"`
		}
		if err == nil {
			err = json.Unmarshal(out, &got)
		}
		r.id = got.Environment.ID
		if err == nil {
			err = cli("", "exec", r.id, "--", "true").Run()
		}
		b.StopTimer()
		r.lease, r.command, r.total, r.err = leased.Sub(start), time.Since(leased), time.Since(start), err
		res = append(res, r)
	}
	crowdReport(b, res, cpuTime()-cpu0, machineBusy()-busy0, load)
	crowdSettle(b, hc, ag, template, runs, res)
	b.StartTimer()
}

// crowdStack runs the dev server in process with the crowd's template and
// an agent with room for four crowds, and gives acme's agent of pool local.
func crowdStack(b *testing.B, runs int, edit func(*fixture.File)) (string, *agent.Agent) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	agents := make(chan *agent.Agent, 1)
	keep := func(org, pool string, a *agent.Agent) {
		if org == "acme" && pool == "local" {
			agents <- a
		}
	}
	var out bytes.Buffer
	go func() {
		done <- run(ctx, options{addr: "127.0.0.1:0", sweep: benchSweep, testDynamo: devstack.NewTestDynamo(b), out: &out,
			ready: func(u string) { ready <- u }, containers: true, agents: keep, capacity: 4 * runs, edit: edit}, apitest.DiscardLogger())
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

// crowdSettle deletes what the runs leased and waits until the agent runs
// nothing, the template's warm pool holds warm ready environments and no
// box is being made ahead, then writes out what the node wrote meanwhile.
func crowdSettle(b *testing.B, c *client.Client, ag *agent.Agent, template string, warm int, res []crowdResult) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, r := range res {
		if r.id == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, _ = c.DeleteEnvironment(ctx, r.id)
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Minute)
	for ag.Running() > 0 || ag.WarmReady(template) < warm || ag.MakingBoxes() {
		if time.Now().After(deadline) {
			b.Fatalf("not settled: the agent runs %d, %d of %d warm ready, making boxes %v", ag.Running(), ag.WarmReady(template), warm, ag.MakingBoxes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What setting up wrote (the warm pool's folders and disks, the
	// stack's own files) is written out now, not by the kernel's flusher
	// threads in the middle of the next mode's runs: a crowd meets a pool
	// made earlier, as it would a node that has run for a while.
	syscall.Sync()
}

// crowdReport prints one mode's figures and reports its median and p99.
func crowdReport(b *testing.B, res []crowdResult, cpu, busy time.Duration, load string) {
	var totals, readyMs []float64
	failures := 0
	var firstErr error
	steps := map[string][]float64{}
	sums := map[string]float64{}
	var sumTotal float64
	for _, r := range res {
		if r.err != nil {
			failures++
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		totals = append(totals, ms(r.total))
		readyMs = append(readyMs, r.readyMs)
		sumTotal += ms(r.total)
		for _, s := range crowdSteps {
			steps[s] = append(steps[s], ms(r.step(s)))
			sums[s] += ms(r.step(s))
		}
	}
	if len(totals) == 0 {
		b.Fatalf("every run failed: %v", firstErr)
	}
	b.ReportMetric(quantile(totals, 0.5), "median-ms")
	b.ReportMetric(quantile(totals, 0.95), "p95-ms")
	b.ReportMetric(quantile(totals, 0.99), "p99-ms")
	b.ReportMetric(float64(failures), "failures")
	b.ReportMetric(ms(cpu)/float64(len(res)), "cpu-ms/run")
	b.ReportMetric(ms(busy)/float64(len(res)), "machine-cpu-ms/run")
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s: %d runs, %d failed, load %s\n", b.Name(), len(res), failures, load)
	fmt.Fprintf(&sb, "  create to first command's exit: median %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		quantile(totals, 0.5), quantile(totals, 0.95), quantile(totals, 0.99), slices.Max(totals))
	fmt.Fprintf(&sb, "  readyMs median %.1f, p99 %.1f; CPU of the stack %.1f ms per run, of the machine %.1f\n", quantile(readyMs, 0.5), quantile(readyMs, 0.99), ms(cpu)/float64(len(res)), ms(busy)/float64(len(res)))
	for _, s := range crowdSteps {
		fmt.Fprintf(&sb, "  %-8s median %7.1f ms  p99 %7.1f ms  share %4.1f %%\n", s, quantile(steps[s], 0.5), quantile(steps[s], 0.99), 100*sums[s]/sumTotal)
	}
	if firstErr != nil {
		fmt.Fprintf(&sb, "  first failure: %v\n", firstErr)
	}
	if os.Getenv("ENVLEASE_CROWD_TIMELINE") != "" {
		ok := slices.DeleteFunc(slices.Clone(res), func(r crowdResult) bool { return r.err != nil })
		slices.SortFunc(ok, func(a, b crowdResult) int { return int(a.total - b.total) })
		for i, r := range ok {
			fmt.Fprintf(&sb, "  %3d lease %6.1f ready %6.1f ticket %6.1f command %6.1f\n", i, ms(r.lease), ms(r.lease+r.ready), ms(r.lease+r.ready+r.ticket), ms(r.total))
		}
	}
	// Printed, not logged: a benchmark's log is cut after a few lines.
	fmt.Print(sb.String())
}

// roomForKeys makes the kernel's key quota of a user hold n keyrings for
// the run: runc gives every container, and every command run in one, a
// session keyring, and all the node's containers map to one host user, so
// the default quota (kernel.keys.maxkeys 200, maxbytes 20000) ends a crowd
// of containers at about 200 with "disk quota exceeded". It raises both to
// what LXD recommends for a container host when they are lower, and puts
// them back afterwards (docs/nodes.md, Containers).
func roomForKeys(b *testing.B, n int) {
	for _, q := range []struct {
		name string
		want int
	}{{"maxkeys", max(2000, 4*n)}, {"maxbytes", max(2000000, 4000*n)}} {
		path := "/proc/sys/kernel/keys/" + q.name
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		was, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		if was >= q.want {
			continue
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(q.want)), 0); err != nil {
			fmt.Printf("note: kernel.keys.%s stays %d (%v): a crowd of more than about 200 containers fails\n", q.name, was, err)
			continue
		}
		fmt.Printf("note: kernel.keys.%s raised from %d to %d for the run\n", q.name, was, q.want)
		b.Cleanup(func() { _ = os.WriteFile(path, []byte(strconv.Itoa(was)), 0) })
	}
}
