package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// warmTemplate is filesTemplate kept warm: the agent pre-starts one process,
// so a lease without files is handed a ready one.
var warmTemplate = func() domain.Template {
	t := filesTemplate
	t.Name, t.Warm, t.Shares = "warmweb", 1, nil
	return t
}()

// BenchmarkRun measures `envlease run` from its start until its command
// starts (the command's first line reaches the benchmark), on the whole
// stack in process: warm, a warm template without shares (the agent hands
// over its pre-started process); share, a cold template with a small share
// (pack, upload, unpack, start). The sandbox is registered before, and the
// environment's deletion after the command is not timed. It reports the
// median beside the mean.
func BenchmarkRun(b *testing.B) {
	s := clienttest.Start(b, clienttest.WithTemplates("acme", warmTemplate, filesTemplate))
	home := b.TempDir()
	cli := func(stdin string, args ...string) *exec.Cmd {
		cmd := exec.Command(binary, args...)
		cmd.Dir = home
		cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
		cmd.Stdin = strings.NewReader(stdin)
		return cmd
	}
	for _, args := range [][]string{{"login", "--url", s.URL}, {"sandbox", "register"}} {
		if out, err := cli(clienttest.BobToken+"\n", args...).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", args, err, out)
		}
	}
	share := b.TempDir()
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(share, "f"+strings.Repeat("x", i%5)+string(rune('a'+i))), []byte(strings.Repeat("data ", 200)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"warm", []string{"run", "-t", "warmweb", "--", "echo", "started"}},
		{"share", []string{"run", "-t", "files", "--share", "src=" + share, "--", "echo", "started"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var took []time.Duration
			for range b.N {
				b.StopTimer()
				// Between runs the agent's pool starts the next warm
				// process and checks it is ready.
				time.Sleep(1500 * time.Millisecond)
				cmd := cli("", bc.args...)
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				var stderr strings.Builder
				cmd.Stderr = &stderr
				b.StartTimer()
				start := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				line, err := bufio.NewReader(stdout).ReadString('\n')
				took = append(took, time.Since(start))
				b.StopTimer()
				if err := cmd.Wait(); err != nil || strings.TrimSpace(line) != "started" {
					b.Fatalf("run: %v, first line %q\n%s", err, line, stderr.String())
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
		})
	}
}
