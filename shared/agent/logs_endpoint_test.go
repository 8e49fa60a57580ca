package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/envlog"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// The live log endpoint opens a log only to a ticket of kind logs, signed
// with the node's key, for its organization, itself and an environment it
// has a log of; it answers from an offset or a time, and follows until the
// log ends.
func TestLogsEndpoint(t *testing.T) {
	key := bytes.Repeat([]byte{7}, ticket.KeySize)
	l, err := envlog.Create(filepath.Join(t.TempDir(), "env.log"), 1<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Remove()
	_, _ = l.Write([]byte("one\ntwo\n"))
	h := agent.NewLogsHandler(agent.LogsConfig{
		Identity: func() (agent.TunnelIdentity, bool) {
			return agent.TunnelIdentity{Org: "acme", Node: "node_1", Key: key}, true
		},
		Logs: func(env string) (*envlog.Log, bool) { return l, env == "env_1" },
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	sign := func(c ticket.Claims) string {
		if c.Exp == 0 {
			c.Exp = time.Now().Add(time.Minute).Unix()
		}
		tk, err := ticket.Sign(key, c)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	good := ticket.Claims{Org: "acme", Env: "env_1", Node: "node_1", Open: ticket.OpenLogs}
	get := func(tk, query string) (int, http.Header, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/logs?"+query, nil)
		if tk != "" {
			req.Header.Set("Authorization", "Bearer "+tk)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	with := func(f func(*ticket.Claims)) string {
		c := good
		f(&c)
		return sign(c)
	}
	refusals := []struct {
		name, ticket, query string
		status              int
	}{
		{"no ticket", "", "env=env_1", 401},
		{"another key", func() string {
			tk, _ := ticket.Sign(bytes.Repeat([]byte{8}, ticket.KeySize), ticket.Claims{Org: "acme", Env: "env_1", Node: "node_1", Open: ticket.OpenLogs, Exp: time.Now().Add(time.Minute).Unix()})
			return tk
		}(), "env=env_1", 401},
		{"expired", with(func(c *ticket.Claims) { c.Exp = time.Now().Add(-time.Hour).Unix() }), "env=env_1", 401},
		{"a tunnel ticket", with(func(c *ticket.Claims) { c.Open = "" }), "env=env_1", 403},
		{"another organization", with(func(c *ticket.Claims) { c.Org = "globex" }), "env=env_1", 403},
		{"another node", with(func(c *ticket.Claims) { c.Node = "node_2" }), "env=env_1", 403},
		{"another environment asked for", sign(good), "env=env_2", 403},
		{"an environment with no log here", with(func(c *ticket.Claims) { c.Env = "env_2" }), "env=env_2", 404},
		{"a bad offset", sign(good), "env=env_1&offset=-1", 400},
		{"an unknown parameter", sign(good), "env=env_1&tail=5", 400},
		{"offset and since", sign(good), "env=env_1&offset=1&since=1m", 400},
	}
	for _, c := range refusals {
		if st, _, body := get(c.ticket, c.query); st != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, st, body, c.status)
		}
	}

	reads := []struct {
		name, query, want, offset string
	}{
		{"whole", "env=env_1", "one\ntwo\n", "0"},
		{"from an offset", "env=env_1&offset=4", "two\n", "4"},
		{"past the end", "env=env_1&offset=99", "", "8"},
		{"since a minute", "env=env_1&since=1m", "one\ntwo\n", "0"},
	}
	for _, c := range reads {
		st, h, body := get(sign(good), c.query)
		if st != 200 || body != c.want || h.Get(agent.LogOffsetHeader) != c.offset || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
			t.Errorf("%s: %d %q from %s", c.name, st, body, h.Get(agent.LogOffsetHeader))
		}
	}

	// A follower gets what is written after it came, until the log ends.
	done := make(chan string, 1)
	go func() {
		_, _, body := get(sign(good), "env=env_1&offset=8&follow=true")
		done <- body
	}()
	// Write until the follower has surely seen a write, then end the log.
	deadline := time.Now().Add(time.Minute)
	for _, end := l.Bounds(); end < 8+5*50 && time.Now().Before(deadline); _, end = l.Bounds() {
		_, _ = l.Write([]byte("more\n"))
		time.Sleep(10 * time.Millisecond)
	}
	l.Close()
	select {
	case body := <-done:
		if !strings.HasPrefix(body, "more\n") || strings.Count(body, "more\n") != 50 {
			t.Fatalf("followed %q", body)
		}
	case <-time.After(time.Minute):
		t.Fatal("the follow did not end with its log")
	}
}

// A node serves a bounded number of log reads at once, and drops a
// follower that stopped reading, so neither holds goroutines and the log's
// file without end.
func TestLogsEndpointBoundsReaders(t *testing.T) {
	key := bytes.Repeat([]byte{7}, ticket.KeySize)
	l, err := envlog.Create(filepath.Join(t.TempDir(), "env.log"), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Remove()
	h := agent.NewLogsHandler(agent.LogsConfig{
		Identity: func() (agent.TunnelIdentity, bool) {
			return agent.TunnelIdentity{Org: "acme", Node: "node_1", Key: key}, true
		},
		Logs:       func(env string) (*envlog.Log, bool) { return l, env == "env_1" },
		MaxReaders: 1, WriteStall: 200 * time.Millisecond,
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	tk, err := ticket.Sign(key, ticket.Claims{Org: "acme", Env: "env_1", Node: "node_1", Open: ticket.OpenLogs, Exp: time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	status := func() int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/logs?env=env_1", nil)
		req.Header.Set("Authorization", "Bearer "+tk)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode
	}

	// A follower that never reads its answer.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /logs?env=env_1&follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+tk+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Its answer began (it holds the read), then it reads no more.
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	head, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(head, " 200 ") {
		t.Fatalf("the follower's answer: %q %v", head, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = l.Write(chunk)
			time.Sleep(time.Millisecond)
		}
	}()
	// While it holds the one read, another is refused; once its writes
	// stalled for longer than allowed it is dropped and reads work again.
	saw503 := false
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := status()
		if st == http.StatusServiceUnavailable {
			saw503 = true
		}
		if st == http.StatusOK && saw503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reads: last %d, refused once: %v; the stalled follower was never dropped", st, saw503)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
