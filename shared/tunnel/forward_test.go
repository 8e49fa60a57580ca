package tunnel_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// api is the API as Forward sees it: one environment on one node, tickets
// of a chosen life, and an error to answer with instead, when set.
type api struct {
	n   *node
	env domain.Environment
	ttl time.Duration

	mu      sync.Mutex
	tickets int
	err     error
}

func (a *api) GetEnvironment(_ context.Context, id string) (domain.Environment, error) {
	if id != a.env.ID {
		return domain.Environment{}, &client.Error{Status: http.StatusNotFound, Code: "not_found", Message: "environment not found"}
	}
	return a.env, nil
}

func (a *api) CreateTunnel(_ context.Context, id string) (client.TunnelTicket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return client.TunnelTicket{}, a.err
	}
	a.tickets++
	var targets []string
	for _, x := range a.env.Exports {
		targets = append(targets, x.Target)
	}
	exp := time.Now().Add(a.ttl).Truncate(time.Second)
	return client.TunnelTicket{URL: a.n.url, Ticket: a.n.ticket(id, targets, func(c *ticket.Claims) { c.Exp = exp.Unix() }), Expires: exp}, nil
}

func (a *api) issued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tickets
}

// freeAddr is a loopback address nothing listens on, as a lease would give.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// conns is a Dialer that keeps every connection it opens, so a test can
// break the tunnel underneath Forward.
type conns struct {
	mu   sync.Mutex
	all  []net.Conn
	dial tunnel.Dialer
}

func (c *conns) Dial(ctx context.Context, url string, h http.Header) (net.Conn, error) {
	conn, err := c.dial(ctx, url, h)
	if err == nil {
		c.mu.Lock()
		c.all = append(c.all, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *conns) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.all)
}

func (c *conns) killLast() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all[len(c.all)-1].Close()
}

// forwarding runs Forward until the test ends and hands over its events as
// they come; err is its result once finished is closed.
type forwarding struct {
	events   chan tunnel.Event
	finished chan struct{}
	err      error
}

func forward(t *testing.T, a tunnel.API, env string, opt tunnel.Options) *forwarding {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &forwarding{events: make(chan tunnel.Event, 100), finished: make(chan struct{})}
	go func() {
		defer close(f.finished)
		f.err = tunnel.Forward(ctx, a, env, func(e tunnel.Event) {
			select {
			case f.events <- e:
			default:
			}
		}, opt)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-f.finished:
		case <-time.After(20 * time.Second):
			t.Error("Forward did not return after its context ended")
		}
	})
	return f
}

// await waits for an event of kind and returns it; other events pass.
func (f *forwarding) await(t *testing.T, kind tunnel.EventKind) tunnel.Event {
	t.Helper()
	timeout := time.After(30 * time.Second) // a hang guard
	for {
		select {
		case e := <-f.events:
			if e.Kind == kind {
				return e
			}
		case <-f.finished:
			t.Fatalf("Forward returned %v while waiting for %s", f.err, kind)
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}

func readyEnv(exports ...domain.EnvExport) domain.Environment {
	return domain.Environment{ID: "env_1", State: domain.StateReady, Node: "node_1", Exports: exports}
}

// When the tunnel drops, Forward redials with a fresh ticket while its
// listener stays open on the same address, and the next connection to it
// works; a connection made through the old tunnel is gone with it.
func TestForwardRedialsKeepingTheListener(t *testing.T) {
	n := newNode(t, nil)
	web := newEcho(t, "web")
	n.run("env_1", web.addr)
	listen := freeAddr(t)
	a := &api{n: n, env: readyEnv(domain.EnvExport{Service: "web", Listen: listen, Target: web.addr}), ttl: 5 * time.Minute}
	cs := &conns{dial: tunnel.WebSocketDialer(nil)}
	f := forward(t, a, "env_1", tunnel.Options{Dial: cs.Dial, MinBackoff: 10 * time.Millisecond})

	f.await(t, tunnel.Connected)
	if e := f.await(t, tunnel.Listening); e.Listen != listen || e.Target != web.addr || e.Service != "web" {
		t.Fatalf("listening: %+v", e)
	}
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := say(t, c, "one"); got != "web: one" {
		t.Fatalf("first connection: %q", got)
	}

	cs.killLast()
	if e := f.await(t, tunnel.Retrying); e.Err == nil {
		t.Fatalf("retrying without a reason: %+v", e)
	}
	f.await(t, tunnel.Connected)
	if cs.count() != 2 || a.issued() != 2 {
		t.Fatalf("%d tunnels dialled with %d tickets, want 2 and 2", cs.count(), a.issued())
	}
	c2, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatalf("the listener is gone after the redial: %v", err)
	}
	defer c2.Close()
	if got := say(t, c2, "two"); got != "web: two" {
		t.Fatalf("after the redial: %q", got)
	}
}

// Before the ticket ends Forward opens a tunnel on a new one; new
// connections use it, while one opened before keeps going on the old.
func TestForwardRenewsTheTicket(t *testing.T) {
	n := newNode(t, nil)
	web := newEcho(t, "web")
	n.run("env_1", web.addr)
	listen := freeAddr(t)
	a := &api{n: n, env: readyEnv(domain.EnvExport{Service: "web", Listen: listen, Target: web.addr}), ttl: 3 * time.Second}
	cs := &conns{dial: tunnel.WebSocketDialer(nil)}
	f := forward(t, a, "env_1", tunnel.Options{Dial: cs.Dial, RenewBefore: 2500 * time.Millisecond})
	f.await(t, tunnel.Listening)
	old, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got := say(t, old, "before"); got != "web: before" {
		t.Fatalf("%q", got)
	}
	if e := f.await(t, tunnel.Renewed); !e.Expires.After(time.Now()) {
		t.Fatalf("renewed with a ticket that has ended: %+v", e)
	}
	fresh, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := say(t, fresh, "after"); got != "web: after" {
		t.Fatalf("%q", got)
	}
	if got := say(t, old, "still"); got != "web: still" {
		t.Fatalf("the connection of the replaced tunnel: %q", got)
	}
	if cs.count() < 2 || a.issued() < 2 {
		t.Fatalf("%d tunnels, %d tickets: nothing was renewed", cs.count(), a.issued())
	}
}

// Forward fails at once, saying why, when a listen address is taken, when
// the environment is not ready, or when the API will not give a ticket; and
// it stops (the listener closes) when a redial learns the environment ended.
func TestForwardFailures(t *testing.T) {
	n := newNode(t, nil)
	web := newEcho(t, "web")
	n.run("env_1", web.addr)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ctx := context.Background()
	a := &api{n: n, env: readyEnv(domain.EnvExport{Service: "web", Listen: held.Addr().String(), Target: web.addr}), ttl: time.Minute}
	if err := tunnel.Forward(ctx, a, "env_1", nil, tunnel.Options{}); err == nil || !strings.Contains(err.Error(), held.Addr().String()) {
		t.Fatalf("a taken listen address: %v", err)
	}
	a.env = readyEnv(domain.EnvExport{Service: "web", Target: web.addr})
	if err := tunnel.Forward(ctx, a, "env_1", nil, tunnel.Options{}); err == nil || !strings.Contains(err.Error(), "without a sandbox") {
		t.Fatalf("no listen address: %v", err)
	}
	a.env = readyEnv(domain.EnvExport{Service: "web", Listen: freeAddr(t), Target: web.addr})
	a.env.State = domain.StateStarting
	if err := tunnel.Forward(ctx, a, "env_1", nil, tunnel.Options{}); err == nil || !strings.Contains(err.Error(), "is starting") {
		t.Fatalf("not ready: %v", err)
	}
	a.env.State = domain.StateReady
	conflict := &client.Error{Status: http.StatusConflict, Code: "conflict", Message: "environment env_1 is stopping"}
	a.err = conflict
	if err := tunnel.Forward(ctx, a, "env_1", nil, tunnel.Options{}); !errors.Is(err, conflict) {
		t.Fatalf("no ticket: %v", err)
	}

	a.err = nil
	cs := &conns{dial: tunnel.WebSocketDialer(nil)}
	f := forward(t, a, "env_1", tunnel.Options{Dial: cs.Dial, MinBackoff: 10 * time.Millisecond})
	f.await(t, tunnel.Listening)
	a.mu.Lock()
	a.err = conflict
	a.mu.Unlock()
	cs.killLast()
	select {
	case <-f.finished:
		if !errors.Is(f.err, conflict) {
			t.Fatalf("Forward ended with %v", f.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Forward goes on for an environment that ended")
	}
	if c, err := net.Dial("tcp", a.env.Exports[0].Listen); err == nil {
		c.Close()
		t.Fatal("the listener is still open after Forward returned")
	}
}
