package tunnel_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// The agent accepts a tunnel only with a ticket signed with its own key,
// not expired, naming its organization, itself and an environment it runs;
// each refusal says why, and is 401 (not a ticket it can accept) or 403
// (a ticket, but not for this).
func TestTicketChecksAtTheUpgrade(t *testing.T) {
	n := newNode(t, nil)
	web := newEcho(t, "web")
	n.run("env_1", web.addr)
	ok := n.ticket("env_1", []string{web.addr}, nil)

	s := dial(t, n, ok)
	c, err := s.Open(context.Background(), web.addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := say(t, c, "hello"); got != "web: hello" {
		t.Fatalf("through the tunnel: %q", got)
	}
	c.Close()

	otherKey := bytes.Repeat([]byte{8}, ticket.KeySize)
	forged, err := ticket.Sign(otherKey, ticket.Claims{Org: "acme", Env: "env_1", Node: "node_1", Targets: []string{web.addr}, Exp: n.clock.Now().Add(time.Minute).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, ticket string
		status       int
		reason       string
	}{
		{"no ticket", "", http.StatusUnauthorized, "takes a ticket"},
		{"bad signature", forged, http.StatusUnauthorized, "signature"},
		{"malformed", "not-a-ticket", http.StatusUnauthorized, "malformed"},
		{"expired", n.ticket("env_1", []string{web.addr}, func(c *ticket.Claims) { c.Exp = n.clock.Now().Add(-time.Minute).Unix() }), http.StatusUnauthorized, "expired"},
		{"other organization", n.ticket("env_1", []string{web.addr}, func(c *ticket.Claims) { c.Org = "globex" }), http.StatusForbidden, "another organization"},
		{"other node", n.ticket("env_1", []string{web.addr}, func(c *ticket.Claims) { c.Node = "node_2" }), http.StatusForbidden, "node node_2"},
		{"other environment", n.ticket("env_2", []string{web.addr}, nil), http.StatusForbidden, "env_2 is not running"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tunnel.Dial(context.Background(), nil, n.url, tc.ticket)
			refusedWith(t, err, tc.status, tc.reason)
		})
	}
	// Time passes: the ticket that opened a tunnel above opens no new one.
	n.clock.Advance(5*time.Minute + ticket.Leeway + time.Second)
	_, err = tunnel.Dial(context.Background(), nil, n.url, ok)
	refusedWith(t, err, http.StatusUnauthorized, "expired")
	if got := n.dials(); len(got) != 1 {
		t.Fatalf("the agent dialled %v, want only the one accepted stream", got)
	}
}

// Every stream reaches only a target that is both one of the ticket's and
// one of the environment's exports now; anything else is refused with a
// reason, and nothing is dialled for it. The agent is never an open proxy.
func TestStreamsReachOnlyTheEnvironmentsExports(t *testing.T) {
	n := newNode(t, nil)
	web, db, outside := newEcho(t, "web"), newEcho(t, "db"), newEcho(t, "outside")
	n.run("env_1", web.addr, db.addr)
	n.run("env_2", outside.addr)
	// The ticket names web and, wrongly, a target of another environment.
	s := dial(t, n, n.ticket("env_1", []string{web.addr, outside.addr}, nil))

	_, err := s.Open(context.Background(), db.addr)
	streamRefused(t, err, "not one of the ticket's")
	_, err = s.Open(context.Background(), outside.addr)
	streamRefused(t, err, "not an export of environment env_1")
	_, err = s.Open(context.Background(), "127.0.0.1:22")
	streamRefused(t, err, "not one of the ticket's")
	if got := n.dials(); len(got) != 0 {
		t.Fatalf("refused streams dialled %v", got)
	}
	if outside.conns() != 0 || db.conns() != 0 {
		t.Fatal("a refused target was connected to")
	}
	c, err := s.Open(context.Background(), web.addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := say(t, c, "still here"); got != "web: still here" {
		t.Fatalf("the allowed target: %q", got)
	}

	// A stream that does not name its target properly is refused too.
	raw := openRaw(t, s)
	if _, err := raw.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	var rep tunnel.Reply
	if err := tunnel.ReadLine(bufio.NewReader(raw), &rep); err != nil || rep.OK || rep.Error == "" {
		t.Fatalf("a stream without a request line: %+v %v", rep, err)
	}

	// Once the ticket has expired, the tunnel opens no new stream; the one
	// already open carries on.
	n.clock.Advance(5*time.Minute + ticket.Leeway + time.Second)
	_, err = s.Open(context.Background(), web.addr)
	streamRefused(t, err, "expired")
	if got := say(t, c, "after expiry"); got != "web: after expiry" {
		t.Fatalf("the open stream after the ticket's end: %q", got)
	}
}

// openRaw opens a stream on s without the request line: Session.Open always
// sends one, so this goes underneath it.
func openRaw(t *testing.T, s *tunnel.Session) net.Conn {
	t.Helper()
	c, err := tunnel.OpenRaw(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A tunnel whose environment stops is closed, streams and all; a tunnel
// carries at most MaxStreams connections at once.
func TestTunnelLimitsAndEnvironmentEnd(t *testing.T) {
	n := newNode(t, func(c *agent.TunnelConfig) { c.MaxStreams = 2; c.CheckEvery = 20 * time.Millisecond })
	web := newEcho(t, "web")
	n.run("env_1", web.addr)
	s := dial(t, n, n.ticket("env_1", []string{web.addr}, nil))
	var open []net.Conn
	for i := 0; i < 2; i++ {
		c, err := s.Open(context.Background(), web.addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	_, err := s.Open(context.Background(), web.addr)
	streamRefused(t, err, "carries 2 connections already")
	open[0].Close()
	// The slot frees once the agent has seen the stream end.
	var c net.Conn
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err = s.Open(context.Background(), web.addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stream after one was closed: %v", err)
		}
	}
	if got := say(t, c, "third"); got != "web: third" {
		t.Fatalf("%q", got)
	}

	n.stop("env_1")
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the tunnel of a stopped environment stays open")
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stream of the closed tunnel still reads: %d %v", n, err)
	}
}

// The node serves at most MaxTunnels tunnels, and at most MaxTunnelsPerEnv
// to one environment, so one environment's tickets cannot take the node's:
// past either a new one is refused with 503 saying which, and another
// environment's still opens.
func TestTunnelsAreBoundedPerEnvironmentAndNode(t *testing.T) {
	n := newNode(t, func(c *agent.TunnelConfig) { c.MaxTunnelsPerEnv = 2; c.MaxTunnels = 3 })
	web := newEcho(t, "web")
	for _, env := range []string{"env_1", "env_2", "env_3"} {
		n.run(env, web.addr)
	}
	open := func(env string) {
		t.Helper()
		s, err := tunnel.Dial(context.Background(), nil, n.url, n.ticket(env, []string{web.addr}, nil))
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		t.Cleanup(func() { s.Close() })
	}
	open("env_1")
	open("env_1")
	_, err := tunnel.Dial(context.Background(), nil, n.url, n.ticket("env_1", []string{web.addr}, nil))
	refusedWith(t, err, http.StatusServiceUnavailable, "env_1 has 2 tunnels and sessions open already")
	open("env_2")
	_, err = tunnel.Dial(context.Background(), nil, n.url, n.ticket("env_3", []string{web.addr}, nil))
	refusedWith(t, err, http.StatusServiceUnavailable, "the node serves 3 tunnels already")
}
