package typescript

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkRoundTrip puts the SDK's create-exec-delete round trip beside
// the CLI's `envlease run -- true`, on the same template of the demo
// (sleeper: a process, no exports) and the same stack in process: b.N
// round trips of each, the SDK's in one node process (test/roundtrip.bench.ts),
// the CLI's one process each, as they are used. It reports the median and
// p99 of each and prints the load average (docs/performance.md):
//
//	go test ./sdk/typescript -run '^$' -bench BenchmarkRoundTrip -benchtime 100x
func BenchmarkRoundTrip(b *testing.B) {
	prepare(b)
	bin := filepath.Join(b.TempDir(), "envlease")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/envlease/envlease/scripts/envlease").CombinedOutput(); err != nil {
		b.Fatalf("go build envlease: %v\n%s", err, out)
	}
	env, url := stack(b)
	home := b.TempDir()
	cli := func(stdin string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = home
		cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
		cmd.Stdin = strings.NewReader(stdin)
		return cmd
	}
	for _, args := range [][]string{{"login", "--url", url}, {"sandbox", "register"}} {
		if out, err := cli(bobToken+"\n", args...).CombinedOutput(); err != nil {
			b.Fatalf("envlease %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	b.ResetTimer()

	cmd := command("node", filepath.Join("dist", "test", "roundtrip.bench.js"), "sleeper", strconv.Itoa(b.N))
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("node roundtrip: %v\n%s", err, errOutput(err))
	}
	var sdk []float64
	if err := json.Unmarshal(out, &sdk); err != nil || len(sdk) != b.N {
		b.Fatalf("node roundtrip printed %q (%v)", out, err)
	}

	var run []float64
	for range b.N {
		start := time.Now()
		if out, err := cli("", "run", "-t", "sleeper", "--", "true").CombinedOutput(); err != nil {
			b.Fatalf("envlease run -- true: %v\n%s", err, out)
		}
		run = append(run, float64(time.Since(start).Microseconds())/1000)
	}
	b.StopTimer()
	b.ReportMetric(quantile(sdk, 0.5), "sdk-median-ms")
	b.ReportMetric(quantile(sdk, 0.99), "sdk-p99-ms")
	b.ReportMetric(quantile(run, 0.5), "cli-median-ms")
	b.ReportMetric(quantile(run, 0.99), "cli-p99-ms")
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average: %s", strings.TrimSpace(string(load)))
	}
}

func errOutput(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// quantile is the q-quantile of xs, nearest rank.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
