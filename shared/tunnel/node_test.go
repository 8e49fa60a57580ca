package tunnel_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// node is an agent's tunnel endpoint with an identity and environments set
// by the test, served on loopback.
type node struct {
	t     testing.TB
	id    agent.TunnelIdentity
	clock *clock.Fake
	url   string
	h     *agent.TunnelHandler

	mu      sync.Mutex
	envs    map[string][]string // environment -> its export targets
	dialled []string
}

func newNode(t testing.TB, tune func(*agent.TunnelConfig)) *node {
	t.Helper()
	n := &node{
		t:     t,
		id:    agent.TunnelIdentity{Org: "acme", Node: "node_1", Key: bytes.Repeat([]byte{7}, ticket.KeySize)},
		clock: clock.NewFake(time.Now()),
		envs:  map[string][]string{},
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	cfg := agent.TunnelConfig{
		Identity: func() (agent.TunnelIdentity, bool) { return n.id, true },
		Targets: func(env string) ([]string, bool) {
			n.mu.Lock()
			defer n.mu.Unlock()
			ts, ok := n.envs[env]
			return ts, ok
		},
		Clock: n.clock,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			n.mu.Lock()
			n.dialled = append(n.dialled, addr)
			n.mu.Unlock()
			return d.DialContext(ctx, network, addr)
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	n.h = agent.NewTunnelHandler(cfg)
	srv := httptest.NewServer(n.h)
	t.Cleanup(func() { n.h.Close(); srv.Close() })
	n.url = "ws://" + srv.Listener.Addr().String() + tunnel.Path
	return n
}

func (n *node) run(env string, targets ...string) {
	n.mu.Lock()
	n.envs[env] = targets
	n.mu.Unlock()
}

func (n *node) stop(env string) {
	n.mu.Lock()
	delete(n.envs, env)
	n.mu.Unlock()
}

func (n *node) dials() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.dialled...)
}

// ticket signs a ticket for env with the node's key, valid for five
// minutes from the node's clock, tuned by tune.
func (n *node) ticket(env string, targets []string, tune func(*ticket.Claims)) string {
	n.t.Helper()
	c := ticket.Claims{Org: n.id.Org, Env: env, Node: n.id.Node, Targets: targets, Exp: n.clock.Now().Add(5 * time.Minute).Unix()}
	if tune != nil {
		tune(&c)
	}
	tk, err := ticket.Sign(n.id.Key, c)
	if err != nil {
		n.t.Fatal(err)
	}
	return tk
}

// echo is a TCP target that answers every line with "<name>: <line>", and
// counts the connections it was given.
type echo struct {
	addr string
	mu   sync.Mutex
	n    int
}

func newEcho(t testing.TB, name string) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e := &echo{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.n++
			e.mu.Unlock()
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, name+": "+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

func (e *echo) conns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// say writes a line on c and returns the line it gets back.
func say(t testing.TB, c net.Conn, line string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a hang guard, not a speed check
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read the answer to %q: %v", line, err)
	}
	return strings.TrimSuffix(got, "\n")
}

func dial(t testing.TB, n *node, tk string) *tunnel.Session {
	t.Helper()
	s, err := tunnel.Dial(context.Background(), nil, n.url, tk)
	if err != nil {
		t.Fatalf("dial the tunnel: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func refusedWith(t *testing.T, err error, status int, reason string) {
	t.Helper()
	var re *tunnel.RefusedError
	if !errors.As(err, &re) || re.Status != status || !strings.Contains(re.Reason, reason) {
		t.Fatalf("got %v, want a %d refusal saying %q", err, status, reason)
	}
}

func streamRefused(t *testing.T, err error, reason string) {
	t.Helper()
	var se *tunnel.StreamError
	if !errors.As(err, &se) || !strings.Contains(se.Reason, reason) {
		t.Fatalf("got %v, want the stream refused saying %q", err, reason)
	}
}
