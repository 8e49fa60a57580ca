package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
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
	refusedURL := "http://" + freeAddr(t)

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
// server still building on its first run) waits for it, and says so.
func TestWaitsForALocalServerStillStarting(t *testing.T) {
	s := clienttest.Start(t)
	addr := freeAddr(t)
	target, _ := url.Parse(s.URL)
	proxy := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	go func() {
		// Not a timing assertion: the server only has to come up after the
		// command's first attempt, whenever that is.
		time.Sleep(time.Second)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		_ = proxy.Serve(ln)
	}()
	t.Cleanup(func() { _ = proxy.Shutdown(context.Background()) })

	u := newUser(t, s)
	u.env = []string{"ENVLEASE_SERVER_WAIT=5m"}
	r := u.run(clienttest.BobToken+"\n", "login", "--url", "http://"+addr)
	if r.code != 0 {
		t.Fatalf("login: exit %d: %s", r.code, r.stderr)
	}
	contains(t, "login's messages", r.stderr, "Waiting for the server at http://"+addr+" to start", "Logged in")
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
