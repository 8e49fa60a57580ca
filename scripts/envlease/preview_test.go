package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// envlease preview prints a link that a plain HTTP client (resolving
// *.localhost to the loopback, as browsers do) opens; --open on a machine
// with no display only prints it.
func TestPreview(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	var leased client.Leased
	u.json(&leased, "lease", "--template", "shell", "--wait")
	env := leased.Environment
	if env.State != domain.StateReady || len(env.Exports) != 1 {
		t.Fatalf("leased %+v", env)
	}

	r := u.run("", "preview", env.ID, "--expires", "10m", "--open")
	link := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(link, "http://") || !strings.Contains(link, ".localhost:") {
		t.Fatalf("preview: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "no display") {
		t.Errorf("--open without a display should say it only prints the link: %q", r.stderr)
	}

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}}
	res, err := hc.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	directStatus, direct := s.GetThroughTunnel(t, clienttest.BobToken, env.ID, env.Exports[0].Target, "/")
	if res.StatusCode != directStatus || string(body) != direct {
		t.Fatalf("through the preview: %d %q; through a tunnel: %d %q", res.StatusCode, body, directStatus, direct)
	}

	var p client.Preview
	u.json(&p, "preview", env.ID, env.Exports[0].Service, "-o", "json")
	if p.URL == "" || p.Export != env.Exports[0].Service || p.Revoked != nil {
		t.Fatalf("preview -o json: %+v", p)
	}
	if r := u.run("", "preview", env.ID, "nosuch"); r.code == 0 || !strings.Contains(r.stderr, "nosuch") {
		t.Fatalf("an export that does not exist: %d %q", r.code, r.stderr)
	}
}
