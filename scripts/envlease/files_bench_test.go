package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

// BenchmarkCopyGiB measures `envlease cp` of one GiB up into an environment
// and back down, the real binary against the whole stack in process (the
// API, the agent's files endpoint, a process environment's folder on the
// same disk): each run copies the file up, then down, and reports MiB/s of
// each direction. docs/performance.md keeps its figures.
func BenchmarkCopyGiB(b *testing.B) {
	const size = 1 << 30
	s := clienttest.Start(b, clienttest.WithTemplates("acme", boxTemplate))
	home := b.TempDir()
	cli := func(args ...string) *exec.Cmd {
		cmd := exec.Command(binary, args...)
		cmd.Dir = home
		cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
		return cmd
	}
	login := cli("login", "--url", s.URL)
	login.Stdin = strings.NewReader(clienttest.BobToken + "\n")
	if out, err := login.CombinedOutput(); err != nil {
		b.Fatalf("login: %v\n%s", err, out)
	}
	c, err := client.New(s.URL, clienttest.BobToken)
	if err != nil {
		b.Fatal(err)
	}
	l, err := c.Lease(b.Context(), client.LeaseRequest{Template: "box"})
	if err != nil {
		b.Fatal(err)
	}
	id := l.Environment.ID
	for {
		e, err := c.WaitReady(b.Context(), id, client.MaxWait)
		if err != nil {
			b.Fatal(err)
		}
		if e.State == "ready" {
			break
		}
	}
	src := filepath.Join(home, "big")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(benchPattern{}, size)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	var up, down time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if out, err := cli("cp", src, id+":big").CombinedOutput(); err != nil {
			b.Fatalf("cp up: %v\n%s", err, out)
		}
		mid := time.Now()
		if out, err := cli("cp", id+":big", filepath.Join(home, "back")).CombinedOutput(); err != nil {
			b.Fatalf("cp down: %v\n%s", err, out)
		}
		up += mid.Sub(start)
		down += time.Since(mid)
	}
	b.StopTimer()
	mib := float64(size>>20) * float64(b.N)
	b.ReportMetric(mib/up.Seconds(), "up-MiB/s")
	b.ReportMetric(mib/down.Seconds(), "down-MiB/s")
	if st, err := os.Stat(filepath.Join(home, "back")); err != nil || st.Size() != size {
		b.Fatalf("the copy back: %v %v", st, err)
	}
}

// benchPattern is an endless reader of bytes that do not compress to nothing.
type benchPattern struct{}

func (benchPattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return len(p), nil
}
