package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/clienttest"
)

// Errors that happen on the client's side say what was tried, the likely
// cause and the fix, as the service's own errors do.
func TestClientErrorsSayWhatToDo(t *testing.T) {
	s := clienttest.Start(t)
	// A server that accepts and never answers, for --timeout.
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(stall.Close)
	refusedAddr, _ := reservedAddr(t)
	refusedURL := "http://" + refusedAddr

	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"refused local", []string{"ENVLEASE_URL=" + refusedURL, "ENVLEASE_TOKEN=" + clienttest.BobToken}, []string{"whoami"},
			exitError, []string{"cannot reach the envlease API at " + refusedURL, "go run ./scripts/devserver", "-addr"}},
		{"refused remote", []string{"ENVLEASE_URL=http://envlease.invalid", "ENVLEASE_TOKEN=" + clienttest.BobToken}, []string{"whoami"},
			exitError, []string{`cannot find the host "envlease.invalid"`, "check the URL"}},
		{"no scheme", []string{"ENVLEASE_URL=" + strings.TrimPrefix(refusedURL, "http://"), "ENVLEASE_TOKEN=" + clienttest.BobToken}, []string{"whoami"},
			exitError, []string{"has no scheme: using " + refusedURL, "cannot reach the envlease API at " + refusedURL}},
		{"other scheme", []string{"ENVLEASE_URL=ftp://127.0.0.1:1", "ENVLEASE_TOKEN=" + clienttest.BobToken}, []string{"whoami"},
			exitUsage, []string{"want an http:// or https:// URL"}},
		{"timeout", []string{"ENVLEASE_URL=" + stall.URL, "ENVLEASE_TOKEN=" + clienttest.BobToken}, []string{"whoami", "--timeout", "300ms"},
			exitTimeout, []string{"--timeout 300ms ran out waiting for the answer to GET /v1/whoami from " + stall.URL}},
		{"unknown token", []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=els_cli_unknown000000000000000000000000000000000"}, []string{"whoami"},
			exitAuth, []string{"unknown token", "envlease login --url URL"}},
		{"malformed token", []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=short"}, []string{"whoami"},
			exitAuth, []string{"malformed bearer token", "envlease login --url URL"}},
		{"mistyped flag", []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=" + clienttest.BobToken}, []string{"lease", "--tempalte", "shell"},
			exitUsage, []string{"unknown flag: --tempalte", "did you mean --template?"}},
		{"unknown template", []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=" + clienttest.BobToken}, []string{"lease", "--template", "shel", "--no-sandbox"},
			exitError, []string{`unknown template "shel"`, "Did you mean --template shell?"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := newUser(t, s)
			u.env = c.env
			r := u.fails(c.code, "", c.args...)
			contains(t, "stderr", r.stderr, c.want...)
			if strings.Contains(r.stderr, "missing") {
				t.Fatalf("a token was sent, yet the message says missing: %s", r.stderr)
			}
		})
	}
}

// A command against a local server that is not listening yet (the dev
// server still building on its first run) waits for it, and says so; the
// server comes up once the command has said it waits.
func TestWaitsForALocalServerStillStarting(t *testing.T) {
	s := clienttest.Start(t)
	addr, listen := reservedAddr(t)
	target, _ := url.Parse(s.URL)
	proxy := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	t.Cleanup(func() { _ = proxy.Shutdown(context.Background()) })

	u := newUser(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "login", "--url", "http://"+addr)
	cmd.Dir = u.home
	cmd.Env = []string{"HOME=" + u.home, "XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"), "PATH=" + os.Getenv("PATH"), "ENVLEASE_SERVER_WAIT=5m"}
	cmd.Stdin = strings.NewReader(clienttest.BobToken + "\n")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for !strings.Contains(stderr.String(), "Waiting for the server at http://"+addr+" to start") {
		select {
		case err := <-done:
			t.Fatalf("login ended (%v) without waiting for the server:\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	ln := listen(t)
	go func() { _ = proxy.Serve(ln) }()
	if err := <-done; err != nil {
		t.Fatalf("login: %v\n%s", err, stderr.String())
	}
	contains(t, "login's messages", stderr.String(), "Logged in")
}

// reservedAddr is a loopback address that refuses connections until listen
// is called: a socket bound to it that does not listen yet. The port stays
// bound all along, so no other process can take it (as one can take a port
// found free and closed before the test uses it).
func reservedAddr(t *testing.T) (string, func(*testing.T) net.Listener) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "reserved port")
	t.Cleanup(func() { _ = f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	listen := func(t *testing.T) net.Listener {
		t.Helper()
		if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
			t.Fatal(err)
		}
		ln, err := net.FileListener(f)
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port), listen
}
