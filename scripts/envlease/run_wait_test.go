package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

// requestLog is a proxy in front of the stack that notes every request the
// CLI makes of the API.
type requestLog struct {
	mu   sync.Mutex
	seen []*http.Request
}

func (l *requestLog) proxy(t *testing.T, to string) string {
	u, err := url.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seen = append(l.seen, r.Clone(r.Context()))
		l.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

var oneEnvPath = regexp.MustCompile(`^/v1/environments/env_[0-9a-z]+$`)

// reads are the GETs of one environment the CLI made, and the templates
// listings.
func (l *requestLog) reads() (envGets []*http.Request, templateLists int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.seen {
		switch {
		case r.Method == http.MethodGet && oneEnvPath.MatchString(r.URL.Path):
			envGets = append(envGets, r)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/templates":
			templateLists++
		}
	}
	return envGets, templateLists
}

// The wait for ready is a long-poll the service answers when the state
// changes, not reads on a timer: a run of a template that takes a while to
// start (the node claims and starts it, then checks its port) reads the
// environment once or twice (once more for each MaxWait a busy machine
// adds), each read asking the service to wait; and a run that names its
// template and sends no shares does not list the templates.
func TestRunWaitsOnTheServiceNotOnATimer(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", filesTemplate))
	var log requestLog
	u := newUser(t, s)
	u.url = log.proxy(t, s.URL)
	u.login(clienttest.BobToken)
	u.ok("sandbox", "register")

	began := time.Now()
	r := u.run("", "run", "-t", "files", "--", "true")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	// Each long-poll is held until ready or for client.MaxWait: one or
	// two when the start takes less than that, as it does on a quiet
	// machine; one more for each MaxWait a busy machine takes longer.
	most := 2 + int(time.Since(began)/client.MaxWait)
	gets, lists := log.reads()
	if len(gets) == 0 || len(gets) > most {
		t.Fatalf("the run read its environment %d times in %s, want 1 to %d long-polls", len(gets), time.Since(began).Round(time.Millisecond), most)
	}
	for _, g := range gets {
		if q := g.URL.Query(); q.Get("wait") != "ready" || q.Get("timeout") == "" {
			t.Fatalf("a read of the environment that does not wait: %s", g.URL)
		}
	}
	if lists != 0 {
		t.Fatalf("the run listed the templates %d times, want 0", lists)
	}

	// A template the organization lacks is said by the lease.
	r = u.fails(exitError, "", "run", "-t", "nosuch", "--", "true")
	if !strings.Contains(r.stderr, "nosuch") {
		t.Fatalf("unknown template: %s", r.stderr)
	}
}
