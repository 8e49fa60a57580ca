package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
)

// BenchmarkRun measures `envlease run --template T -- echo started` on the
// whole local stack (the dev server in process: HTTP API, the test pass's
// DynamoDB, versitygw, the embedded agent over the node protocol), from
// starting the built CLI until the command's first line arrives, until
// the command has exited, and until envlease itself has exited (after
// deleting the environment). process leases warmweb (a pre-started
// process), container warmbox (a pre-started container under runc, where
// the dev server runs as root with runc); each runs on a stack of its own.
// Before each run (untimed) the previous environment has stopped and the
// pool has its warm one ready again. Run with -benchtime 100x: it reports
// the median and p99 of each, and prints each step's median, p99 and mean
// share of the time to the command's exit, from the CLI's step times
// (ENVLEASE_TIMINGS) and the stack's log.
func BenchmarkRun(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "envlease")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/envlease/envlease/scripts/envlease").CombinedOutput(); err != nil {
		b.Fatalf("go build envlease: %v\n%s", err, out)
	}
	leasedRE := regexp.MustCompile(`Leased (env_[0-9a-z]+)`)
	for _, tc := range []struct{ name, template string }{{"process", "warmweb"}, {"container", "warmbox"}} {
		b.Run(tc.name, func(b *testing.B) {
			// A stack of its own: the run's figures do not depend on what
			// ran before it (minidyn's queries walk the whole table).
			logs := &logRecorder{}
			base := runBenchStack(b, slog.New(logs))
			c := api{t: b, base: base, token: apitest.BobToken}
			home := b.TempDir()
			timings := filepath.Join(home, "timings.json")
			cli := func(stdin string, args ...string) *exec.Cmd {
				cmd := exec.Command(bin, args...)
				cmd.Dir = home
				cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH"), "ENVLEASE_TIMINGS=" + timings}
				cmd.Stdin = strings.NewReader(stdin)
				return cmd
			}
			for _, args := range [][]string{{"login", "--url", base}, {"sandbox", "register"}} {
				if out, err := cli(apitest.BobToken+"\n", args...).CombinedOutput(); err != nil {
					b.Fatalf("%s: %v\n%s", args, err, out)
				}
			}
			var list struct {
				Templates []domain.Template `json:"templates"`
			}
			c.do("GET", "/v1/templates", nil, &list)
			if !slices.ContainsFunc(list.Templates, func(t domain.Template) bool { return t.Name == tc.template }) {
				b.Skipf("no template %s: the dev server does not run as root with runc", tc.template)
			}
			var firstOut, cmdExit, cliExit []float64
			var runs []map[string]time.Time
			warm := logs.counter(func(r logRec) bool { return r.msg == "warm environment ready" && r.attrs["template"] == tc.template })
			for i := range b.N {
				b.StopTimer()
				// The pool's warm environment is ready again (one at the
				// start, one more after each run).
				warm.waitFor(b, i+1)
				from := logs.len()
				cmd := cli("", "run", "-t", tc.template, "--", "echo", "started")
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				_ = os.Remove(timings)
				b.StartTimer()
				start := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				line, _ := bufio.NewReader(stdout).ReadString('\n')
				out := time.Now()
				err = cmd.Wait()
				end := time.Now()
				b.StopTimer()
				if err != nil || strings.TrimSpace(line) != "started" {
					b.Fatalf("run: %v, first line %q\n%s", err, line, stderr.String())
				}
				at := stepInstants(b, timings, logs.since(from))
				at["exec"], at["first-output"], at["exit"] = start, out, end
				runs = append(runs, at)
				firstOut = append(firstOut, ms(out.Sub(start)))
				cmdExit = append(cmdExit, ms(at["command-exit"].Sub(start)))
				cliExit = append(cliExit, ms(end.Sub(start)))
				if m := leasedRE.FindStringSubmatch(stderr.String()); m != nil {
					c.waitState(m[1], domain.StateStopped, time.Minute)
				}
				b.StartTimer()
			}
			b.ReportMetric(quantile(firstOut, 0.5), "first-output-median-ms")
			b.ReportMetric(quantile(firstOut, 0.99), "first-output-p99-ms")
			b.ReportMetric(quantile(cmdExit, 0.5), "command-exit-median-ms")
			b.ReportMetric(quantile(cmdExit, 0.99), "command-exit-p99-ms")
			b.ReportMetric(quantile(cliExit, 0.5), "cli-exit-median-ms")
			b.ReportMetric(quantile(cliExit, 0.99), "cli-exit-p99-ms")
			// Printed, not logged: a benchmark's log is cut after a few lines.
			fmt.Printf("--- %s: %d runs\n%s", b.Name(), len(runs), stepTable(runs))
			if n := len(cmdExit); n >= 40 {
				// Whether the stack slows down as its table grows.
				fmt.Printf("command exit, median of the first 20 runs %.1f ms, of the last 20 %.1f ms\n",
					quantile(cmdExit[:20], 0.5), quantile(cmdExit[n-20:], 0.5))
			}
		})
	}
}

// runSteps are the instants of a run in the order they happen, each named
// for the step that ends there: from the benchmark (exec, first-output,
// exit), the CLI's ENVLEASE_TIMINGS (init … release), and the stack's log
// (claim-begin, claim, agent-start, report, ticket-served, tunnel-opened).
var runSteps = []struct{ at, step string }{
	{"init", "CLI start (exec to Go's init)"},
	{"session", "auth (profile and token read, client made)"},
	{"template", "template read (GET /v1/templates)"},
	{"lease", "lease (POST /v1/environments answered)"},
	{"claim-begin", "wake (the offer reaches the node, its claim is sent)"},
	{"claim", "claim (the claim message handled)"},
	{"agent-start", "start (the agent hands over its warm environment)"},
	{"report-begin", "ready check (the agent checks the port, sends its report)"},
	{"report", "ready report (the report message handled)"},
	{"wait", "the client's wait (its long-poll answered)"},
	{"ticket", "ticket (POST …/tunnel answered)"},
	{"dial", "dial (tunnel up, listeners open)"},
	{"command-start", "command started"},
	{"first-output", "command's first output"},
	{"command-exit", "command exited"},
	{"release", "release (DELETE answered)"},
	{"exit", "envlease exits"},
}

// stepInstants reads the CLI's step times and picks the stack's from the
// log records of the run.
func stepInstants(b *testing.B, path string, recs []logRec) map[string]time.Time {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("timings: %v", err)
	}
	var t struct {
		Start int64 `json:"start"`
		Steps []struct {
			Step string `json:"step"`
			At   int64  `json:"at"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		b.Fatalf("timings: %v", err)
	}
	at := map[string]time.Time{"init": time.Unix(0, t.Start)}
	for _, s := range t.Steps {
		if _, ok := at[s.Step]; !ok {
			at[s.Step] = time.Unix(0, s.At)
		}
	}
	first := func(name string, tm time.Time) {
		if _, ok := at[name]; !ok {
			at[name] = tm
		}
	}
	for _, r := range recs {
		switch {
		case r.attrs["route"] == "WS claim" && r.attrs["status"] == "200":
			first("claim-begin", r.time.Add(-time.Duration(r.ms)*time.Millisecond))
			first("claim", r.time)
		case r.msg == "handed a warm environment" || r.msg == "started":
			first("agent-start", r.time)
		case r.attrs["route"] == "WS report":
			if _, ok := at["agent-start"]; ok {
				first("report-begin", r.time.Add(-time.Duration(r.ms)*time.Millisecond))
				first("report", r.time)
			}
		}
	}
	return at
}

// stepTable is each step's median and its mean share of the time to the
// command's exit. Instants that came before the one listed ahead of them
// (the node may claim before the lease's answer reaches the client) count
// as that one: each step is the time it added.
func stepTable(runs []map[string]time.Time) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-58s %9s %9s %7s\n", "step", "median ms", "p99 ms", "share")
	durs := make([][]float64, len(runs[0:0])+len(runSteps))
	var shares = make([]float64, len(runSteps))
	for _, at := range runs {
		prev := at["exec"]
		total := at["command-exit"].Sub(prev)
		for i, s := range runSteps {
			t, ok := at[s.at]
			if !ok || t.Before(prev) {
				t = prev
			}
			d := t.Sub(prev)
			durs[i] = append(durs[i], ms(d))
			if s.at != "release" && s.at != "exit" && total > 0 {
				shares[i] += float64(d) / float64(total) / float64(len(runs))
			}
			prev = t
		}
	}
	for i, s := range runSteps {
		share := fmt.Sprintf("%.0f%%", 100*shares[i])
		if s.at == "release" || s.at == "exit" {
			share = "(after)"
		}
		fmt.Fprintf(&sb, "%-58s %9.1f %9.1f %7s\n", s.step, quantile(durs[i], 0.5), quantile(durs[i], 0.99), share)
	}
	return sb.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// quantile is the q-quantile of xs by the nearest rank.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// runBenchStack is benchStack with the stack's log going to log.
func runBenchStack(b *testing.B, log *slog.Logger) string {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		// The jobs' period is the dev server's default: each run of them
		// queries every due-index shard, which minidyn answers by walking
		// the whole table.
		done <- run(ctx, options{addr: "127.0.0.1:0", sweep: 15 * time.Second, testDynamo: devstack.NewTestDynamo(b), out: &out, ready: func(u string) { ready <- u }, containers: true}, log)
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

// logRec is one record of the stack's log: its time, message, and its
// attributes as text.
type logRec struct {
	time  time.Time
	msg   string
	ms    int64
	attrs map[string]string
}

// logRecorder is a slog.Handler that keeps every record (at info and
// above), for the benchmark to read the stack's steps from.
type logRecorder struct {
	mu    sync.Mutex
	recs  []logRec
	attrs []slog.Attr // of a handler made by WithAttrs; shares mu and recs via root
	root  *logRecorder
}

func (l *logRecorder) base() *logRecorder {
	if l.root != nil {
		return l.root
	}
	return l
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{time: r.Time, msg: r.Message, attrs: map[string]string{}}
	add := func(a slog.Attr) {
		rec.attrs[a.Key] = a.Value.String()
		if a.Key == "ms" {
			rec.ms = a.Value.Int64()
		}
	}
	for _, a := range l.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	root := l.base()
	root.mu.Lock()
	root.recs = append(root.recs, rec)
	root.mu.Unlock()
	return nil
}

func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{root: l.base(), attrs: append(slices.Clone(l.attrs), as...)}
}

func (l *logRecorder) WithGroup(string) slog.Handler { return l }

func (l *logRecorder) len() int {
	root := l.base()
	root.mu.Lock()
	defer root.mu.Unlock()
	return len(root.recs)
}

func (l *logRecorder) since(i int) []logRec {
	root := l.base()
	root.mu.Lock()
	defer root.mu.Unlock()
	return slices.Clone(root.recs[i:])
}

// logCounter counts the records that match, reading each record once.
type logCounter struct {
	l     *logRecorder
	match func(logRec) bool
	read  int // records looked at
	n     int // of which matched
}

func (l *logRecorder) counter(match func(logRec) bool) *logCounter {
	return &logCounter{l: l, match: match}
}

// waitFor waits until at least n records matched.
func (c *logCounter) waitFor(b *testing.B, n int) {
	deadline := time.Now().Add(time.Minute)
	for {
		for _, r := range c.l.since(c.read) {
			c.read++
			if c.match(r) {
				c.n++
			}
		}
		if c.n >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the stack's log has %d of %d records waited for", c.n, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
