package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

// BenchmarkPreviewFirstByte measures the time to first byte of GET / of an
// environment's web export, on the whole stack in process, through the two
// ways a person reaches it: a running `envlease port-forward` (client
// listener, tunnel, agent, target) and a preview link (the agent's preview
// proxy, its cookie already set), each request on a new connection, the
// two in turns. It reports the medians.
//
//	go test -run '^$' -bench PreviewFirstByte -benchtime 200x ./scripts/envlease/
func BenchmarkPreviewFirstByte(b *testing.B) {
	s := clienttest.Start(b)
	home := b.TempDir()
	cli := func(stdin string, args ...string) *exec.Cmd {
		cmd := exec.Command(binary, args...)
		cmd.Dir = home
		cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
		cmd.Stdin = strings.NewReader(stdin)
		return cmd
	}
	run := func(args ...string) []byte {
		out, err := cli(clienttest.BobToken+"\n", args...).Output()
		if ee, ok := err.(*exec.ExitError); ok {
			b.Fatalf("%s: %v\n%s", args, err, ee.Stderr)
		} else if err != nil {
			b.Fatalf("%s: %v", args, err)
		}
		return out
	}
	run("login", "--url", s.URL)
	run("sandbox", "register")
	var leased client.Leased
	if err := json.Unmarshal(run("lease", "--template", "shell", "--wait", "-o", "json"), &leased); err != nil {
		b.Fatal(err)
	}
	env := leased.Environment
	link := strings.TrimSpace(string(run("preview", env.ID)))

	pf := cli("", "port-forward", env.ID, "-o", "json")
	out, err := pf.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // the mapping: every listener is open
		b.Fatal(err)
	}

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: time.Minute, Transport: &http.Transport{
		DisableKeepAlives: true, // a new connection each time, as a browser's first request
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if h, port, _ := net.SplitHostPort(addr); strings.HasSuffix(h, ".localhost") {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	first := func(u string) time.Duration {
		var took time.Duration
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotFirstResponseByte: func() { took = time.Since(start) },
		}))
		res, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("GET %s: %d", u, res.StatusCode)
		}
		return took
	}
	first(link) // trades the token for the cookie
	bare := link[:strings.Index(link, "?")]
	forward := "http://" + env.Exports[0].Listen + "/"
	var viaForward, viaPreview []time.Duration
	for b.Loop() {
		viaForward = append(viaForward, first(forward))
		viaPreview = append(viaPreview, first(bare))
	}
	b.ReportMetric(float64(median(viaForward).Microseconds()), "port-forward-µs")
	b.ReportMetric(float64(median(viaPreview).Microseconds()), "preview-µs")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
