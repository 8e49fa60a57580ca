package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
)

// socketStack is newStack that also serves the node protocol's WebSocket,
// names it in registrations, and wakes a node after every lease.
type socketStack struct {
	*stack
	sockets *nodes.LocalSockets
	offerer *nodes.Offerer
	stopper *nodes.Stopper
	// beats and claims count the heartbeats and claims the node
	// protocol's handler took (each counted once handled).
	beats, claims atomic.Int32
	// dropOffers swallows every offer while set.
	dropOffers atomic.Bool
	// dropNetwork swallows every network rules push while set.
	dropNetwork atomic.Bool
}

func newSocketStack(t *testing.T, templates ...domain.Template) *socketStack {
	t.Helper()
	return newSocketStackEvery(t, 0, templates...)
}

// newSocketStackEvery is newSocketStack whose service writes a node's
// deadline every deadlineEvery (0: the default).
func newSocketStackEvery(t *testing.T, deadlineEvery time.Duration, templates ...domain.Template) *socketStack {
	t.Helper()
	ss := &socketStack{}
	ctx, cancel := context.WithCancel(context.Background())
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		svc := nodes.NewService(e.Store, nil, e.Clock, nodes.Options{HeartbeatInterval: 200 * time.Millisecond,
			PollMax: 20 * time.Millisecond, DeadlineEvery: deadlineEvery, SocketURL: "ws" + strings.TrimPrefix(srv.URL, "http") + nodes.SocketPath})
		log := slog.New(beatCounter{n: &ss.beats, claims: &ss.claims, next: e.Log.Handler()})
		ss.sockets = nodes.NewLocalSockets(ctx, nodes.NewSocket(svc, e.Store, log), apitest.NewAuth(e))
		ss.offerer = nodes.NewOfferer(e.Store, ss.sockets, e.Clock, e.Log, time.Second)
		ss.stopper = nodes.NewStopper(e.Store, ss.sockets, e.Clock, e.Log, time.Second)
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, e.Clock,
			environments.WithTemplateTTL(0), environments.WithOfferer(ss.offerer), environments.WithStopper(ss.stopper)))}
	})
	ss.sockets.DropPosts(func(_ nodes.ConnectionID, msg []byte) bool {
		return ss.dropOffers.Load() || ss.dropNetwork.Load() && bytes.Contains(msg, []byte(`"type":"network"`))
	})
	for _, tpl := range templates {
		tpl.Pools = []string{"local"}
		tpl.Timeouts = domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)}
		tpl.Quota = domain.Quota{MaxLeases: 5}
		if err := e.Store.PutTemplate(context.Background(), "acme", tpl); err != nil {
			t.Fatal(err)
		}
	}
	mux.Handle(nodes.SocketPath, ss.sockets)
	mux.Handle("/", apitest.CheckedHandler(t, e.Handler))
	t.Cleanup(func() { cancel(); ss.sockets.Close(); srv.Close() })
	ss.stack = &stack{Env: e, url: srv.URL}
	return ss
}

// beatCounter counts the heartbeat (and claim) lines of the handler's
// request log.
type beatCounter struct {
	n, claims *atomic.Int32
	next      slog.Handler
}

func (b beatCounter) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (b beatCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return beatCounter{n: b.n, claims: b.claims, next: b.next.WithAttrs(as)}
}
func (b beatCounter) WithGroup(g string) slog.Handler {
	return beatCounter{n: b.n, claims: b.claims, next: b.next.WithGroup(g)}
}
func (b beatCounter) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "route" && a.Value.String() == "WS heartbeat" {
			b.n.Add(1)
		}
		if a.Key == "route" && a.Value.String() == "WS claim" {
			b.claims.Add(1)
		}
		return true
	})
	if !b.next.Enabled(ctx, r.Level) {
		return nil
	}
	return b.next.Handle(ctx, r)
}

// startAgent runs an agent of acme's pool "local" with tune applied, and
// returns it.
func (s *stack) startAgent(t *testing.T, tune func(*agent.Config)) *agent.Agent {
	t.Helper()
	return s.runAgentReturning(t, t.TempDir(), 500*time.Millisecond, tune)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var sleeper = domain.Template{Name: "sleeper", Command: []string{"sleep", "3600"}, Runtime: "process"}

// Over the node protocol: a lease wakes the agent, it claims, runs and
// reports ready; a delete reaches it as a stop message and it reports
// stopped.
func TestAgentOverTheNodeProtocol(t *testing.T) {
	s := newSocketStack(t, sleeper)
	a := s.startAgent(t, nil)
	waitFor(t, "the node protocol connection", func() bool { return a.Transport() == agent.TransportWebSocket })
	id := s.lease(t, "sleeper")
	s.wait(t, id, domain.StateReady)
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	s.wait(t, id, domain.StateStopped)
}

// A lost offer delays the lease until the re-offer job sends it again.
func TestLostOfferIsReoffered(t *testing.T) {
	s := newSocketStack(t, sleeper)
	a := s.startAgent(t, nil)
	waitFor(t, "the node protocol connection", func() bool { return a.Transport() == agent.TransportWebSocket })
	// The agent claims once when it connects; wait until the service has
	// answered it (a claim still in flight would find the lease and take
	// it without any offer).
	waitFor(t, "the claim at the connection", func() bool { return s.claims.Load() > 0 })
	s.dropOffers.Store(true)
	id := s.lease(t, "sleeper")
	time.Sleep(300 * time.Millisecond)
	if e := s.get(t, id); e.State != domain.StatePending {
		t.Fatalf("with its offer lost the environment is %s, want pending", e.State)
	}
	s.dropOffers.Store(false)
	s.Clock.Advance(time.Second)
	if res, err := s.offerer.Reoffer(context.Background()); err != nil || res.Reoffered != 1 {
		t.Fatalf("re-offer: %+v %v", res, err)
	}
	s.wait(t, id, domain.StateReady)
}

// A lease made before the node's connection was recorded was offered to
// nobody (no re-offer job runs here): the claim the agent makes when it
// connects must find it, even when an offer of a later lease reached the
// connection first and is queued for that claim.
func TestConnectClaimFindsWhatWasNotOffered(t *testing.T) {
	s := newSocketStack(t, sleeper)
	early := s.lease(t, "sleeper") // no node connected: offered to nobody
	first := make(chan func() int, 1)
	release := make(chan struct{})
	var hold, free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	s.startAgent(t, agent.BeforeSocketClaim(func(queued func() int) {
		hold.Do(func() { first <- queued; <-release })
	}))
	var queued func() int
	select {
	case queued = <-first: // hello answered, the connection recorded
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the agent made no claim on its connection")
	}
	late := s.lease(t, "sleeper") // offered to the agent's connection
	waitFor(t, "the offer queued for the first claim", func() bool { return queued() > 0 })
	free.Do(func() { close(release) })
	s.wait(t, late, domain.StateReady)
	s.wait(t, early, domain.StateReady)
}

// An offer that finds the agent's queue full is dropped; the next claim
// then asks for pending ones up to the room, so the lease is not left for
// the re-offer job (a claim of queued offers names only those).
func TestDroppedOfferIsFoundByTheNextClaim(t *testing.T) {
	s := newSocketStack(t, sleeper)
	var calls atomic.Int32
	held := make(chan func() int, 1)
	release := make(chan struct{})
	var free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	a := s.startAgent(t, func(c *agent.Config) {
		agent.QueuedOffers(1)(c)
		agent.BeforeSocketClaim(func(queued func() int) {
			if calls.Add(1) == 2 { // the claim the first offer wakes
				held <- queued
				<-release
			}
		})(c)
	})
	// The claim at the connection, answered: the loop waits for offers.
	waitFor(t, "the claim at the connection", func() bool { return s.claims.Load() > 0 })
	first := s.lease(t, "sleeper")
	var queued func() int
	select {
	case queued = <-held:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the offer woke no claim")
	}
	second := s.lease(t, "sleeper") // queued
	waitFor(t, "the second offer queued", func() bool { return queued() == 1 })
	third := s.lease(t, "sleeper") // the queue is full: dropped
	waitFor(t, "the third offer dropped", a.OfferDropped)
	free.Do(func() { close(release) })
	for _, id := range []string{first, second, third} {
		s.wait(t, id, domain.StateReady)
	}
}

// A dropped connection is opened again (with backoff), the node resumed on
// it, and leases reach it there.
func TestAgentReconnects(t *testing.T) {
	s := newSocketStack(t, sleeper)
	a := s.startAgent(t, nil)
	waitFor(t, "the node protocol connection", func() bool { return s.sockets.Connections() == 1 })
	s.sockets.CloseAll()
	waitFor(t, "a reconnection", func() bool { return a.Reconnects() >= 1 && a.Transport() == agent.TransportWebSocket })
	id := s.lease(t, "sleeper")
	s.wait(t, id, domain.StateReady)
}

// Where the WebSocket does not open, or HTTP is asked for, the agent
// heartbeats and long-polls over HTTP, and leases still run.
func TestAgentHTTPFallback(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*agent.Config)
	}{
		{"websocket refused", func(c *agent.Config) { c.SocketURL = "ws" + strings.TrimPrefix(c.API, "http") + "/v1/no-socket-here" }},
		{"http asked for", func(c *agent.Config) { c.Transport = agent.TransportHTTP }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSocketStack(t, sleeper)
			a := s.startAgent(t, tc.tune)
			id := s.lease(t, "sleeper")
			s.wait(t, id, domain.StateReady)
			if got := a.Transport(); got != agent.TransportHTTP || s.sockets.Connections() != 0 {
				t.Fatalf("transport %s with %d connections, want http and none", got, s.sockets.Connections())
			}
		})
	}
}

func (s *stack) get(t *testing.T, id string) domain.Environment {
	t.Helper()
	var out domain.Environment
	s.Do("GET", "/v1/environments/"+id, apitest.BobToken, nil).JSON(t, &out)
	return out
}

// A stop message that is lost delays the stop until the stop job sends it
// again; the agent then tears the environment down and reports it stopped.
func TestLostStopIsResent(t *testing.T) {
	s := newSocketStack(t, sleeper)
	a := s.startAgent(t, nil)
	waitFor(t, "the node protocol connection", func() bool { return a.Transport() == agent.TransportWebSocket && s.beats.Load() > 0 })
	beats := s.beats.Load()
	id := s.lease(t, "sleeper")
	s.wait(t, id, domain.StateReady)
	// The agent beats only when something changed: the beat naming the new
	// environment (it read it ready, and will not read it again).
	waitFor(t, "the beat naming the environment", func() bool { return s.beats.Load() > beats })
	var lost atomic.Int32
	s.sockets.DropPosts(func(_ nodes.ConnectionID, msg []byte) bool {
		if strings.Contains(string(msg), `"type":"stop"`) {
			lost.Add(1)
			return true
		}
		return false
	})
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if lost.Load() != 1 {
		t.Fatalf("%d stop messages lost, want 1", lost.Load())
	}
	time.Sleep(500 * time.Millisecond) // two heartbeat ticks: nothing tells the agent
	if e := s.get(t, id); e.State != domain.StateStopping {
		t.Fatalf("with its stop message lost the environment is %s, want stopping", e.State)
	}
	s.sockets.DropPosts(nil)
	s.Clock.Advance(30 * time.Second)
	if res, err := s.stopper.Resend(context.Background()); err != nil || res.Resent != 1 {
		t.Fatalf("stop job: %+v %v", res, err)
	}
	s.wait(t, id, domain.StateStopped)
}
