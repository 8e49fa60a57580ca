// Package netstack is an environment's network boundary: a TUN device in
// the environment's network namespace, with a default route through it,
// whose other end is a userspace TCP/IP stack (gVisor's tcpip) in the
// agent. Every TCP connection and UDP flow the environment opens ends in
// that stack, where the agent decides it by the environment's network
// policy (package netpolicy) and by the guard that keeps the node's own
// addresses and every private range out of reach, then opens the same
// connection from the node and copies both ways. The agent answers the
// environment's DNS itself, so a rule by name holds for exactly the
// addresses that name resolved to for this environment, and reads the name
// a TLS ClientHello (SNI) or an HTTP request (Host) carries before it lets
// a byte through. Every connection, refusal and DNS question is a record
// of the environment's network log. See docs/nodes.md, "Network boundary".
package netstack

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/netpolicy"
)

// Addresses of the TUN link: the environment's end and the stack's, which
// is also the environment's DNS server. They are in a private range, which
// the guard refuses as a destination, so nothing but DNS ever reaches the
// stack's address.
var (
	EnvAddr   = netip.MustParseAddr("10.73.0.2")
	StackAddr = netip.MustParseAddr("10.73.0.1")
)

// LinkName is the TUN device's name in the environment's namespace.
const LinkName = "envlease0"

// MTU of the TUN link.
const MTU = 65520

// Resolver resolves the names the environment asks for (net.Resolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is what a boundary needs from the agent.
type Config struct {
	// Policy is the environment's policy at start: the template's layer,
	// then the environment's own (SetPolicy replaces them).
	Policy netpolicy.Layers
	// Guard refuses an address whatever the policy says (the node's own
	// addresses, private ranges): it returns why, or nil.
	Guard func(netip.AddrPort) error
	// Resolver answers the environment's DNS (default net.DefaultResolver).
	Resolver Resolver
	// Log receives the network log's records (nil: none kept).
	Log Recorder
	// Dial opens the node's side of a connection (default: a net.Dialer
	// with a 15 s timeout). Only tests set it, to reach their "outside"
	// servers, which listen on the node's loopback, at addresses the
	// environment can route to.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Slog is the agent's own log.
	Slog *slog.Logger
	// Now is the clock of the records (default time.Now).
	Now func() time.Time
	// RefusedPerSecond bounds the refusals recorded and reported as events
	// (default 20 a second, bursts of 100); the rest are counted into the
	// next one recorded.
	RefusedPerSecond float64
	// MaxFlows bounds the connections and UDP flows the environment has
	// open through the boundary at once (default DefaultMaxFlows): each
	// holds a socket of the node and two copies in the agent. One more is
	// refused, recorded with the bound as its rule.
	MaxFlows int
	// Secrets, when it binds any, are added to the HTTPS requests to the
	// hosts they are bound to, whose TLS the boundary then terminates
	// with a certificate of the environment's own CA (CACert).
	Secrets *Secrets
}

// DefaultMaxFlows is Config.MaxFlows when it is not set.
const DefaultMaxFlows = 4096

// Recorder keeps network records.
type Recorder interface {
	Record(Record)
}

// Boundary is one environment's network boundary, alive until Close.
type Boundary struct {
	cfg   Config
	names *names
	ref   *refusals
	sec   *interceptor // nil: no secret bound, nothing terminated

	// open counts the flows admitted and not yet ended (Config.MaxFlows).
	open atomic.Int64

	mu     sync.Mutex
	policy netpolicy.Layers
	flows  map[*flow]struct{}
	// doneSent and doneReceived are the bytes of the flows that ended
	// (Bytes).
	doneSent, doneReceived int64
	closed                 bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   func() // the platform's part (stack, TUN)
	once   sync.Once
}

func newBoundary(cfg Config) *Boundary {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{Timeout: 15 * time.Second}).DialContext
	}
	if cfg.Slog == nil {
		cfg.Slog = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RefusedPerSecond == 0 {
		cfg.RefusedPerSecond = 20
	}
	if cfg.MaxFlows <= 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Boundary{
		cfg: cfg, names: newNames(cfg.Now), ref: newRefusals(cfg.RefusedPerSecond),
		policy: cfg.Policy, flows: map[*flow]struct{}{}, ctx: ctx, cancel: cancel,
	}
}

// Policy is the environment's policy now.
func (b *Boundary) Policy() netpolicy.Layers {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policy
}

// SetPolicy replaces the environment's policy: new connections and DNS
// questions are decided by it from now on, and every open connection it
// refuses is closed, with a record naming the rule.
func (b *Boundary) SetPolicy(p netpolicy.Layers) {
	b.mu.Lock()
	b.policy = p
	var refused []*flow
	for f := range b.flows {
		if d := b.decideLocked(f.target()); !d.Allow {
			f.closedBy = d.Rule
			refused = append(refused, f)
		}
	}
	b.mu.Unlock()
	for _, f := range refused {
		f.close()
	}
}

// decide judges a connection: the guard first (whatever the policy
// says), then the policy.
func (b *Boundary) decide(t netpolicy.Target) netpolicy.Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.decideLocked(t)
}

func (b *Boundary) decideLocked(t netpolicy.Target) netpolicy.Decision {
	if b.cfg.Guard != nil {
		if err := b.cfg.Guard(netip.AddrPortFrom(t.Addr, t.Port)); err != nil {
			return netpolicy.Decision{Rule: "guard: " + err.Error()}
		}
	}
	return b.policy.Decide(t)
}

func (b *Boundary) decideName(name string) netpolicy.Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policy.DecideName(name)
}

// track adds an open flow, false once the boundary closed.
func (b *Boundary) track(f *flow) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.flows[f] = struct{}{}
	return true
}

// admit takes a place for one more flow, or refuses it at the bound with
// the decision that says so; release gives the place back when it ends.
func (b *Boundary) admit() (netpolicy.Decision, bool) {
	if b.open.Add(1) > int64(b.cfg.MaxFlows) {
		b.open.Add(-1)
		return netpolicy.Decision{Rule: "limit: " + strconv.Itoa(b.cfg.MaxFlows) + " open connections"}, false
	}
	return netpolicy.Decision{}, true
}

func (b *Boundary) release() { b.open.Add(-1) }

func (b *Boundary) untrack(f *flow) {
	b.mu.Lock()
	if _, ok := b.flows[f]; ok {
		b.doneSent += f.sent.Load()
		b.doneReceived += f.received.Load()
	}
	delete(b.flows, f)
	b.mu.Unlock()
}

// Bytes are the bytes the environment sent and received through the
// boundary so far (counters): of the flows that ended, and so far of those
// open. It is what the agent's metrics and its network activity read.
func (b *Boundary) Bytes() (sent, received int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sent, received = b.doneSent, b.doneReceived
	for f := range b.flows {
		sent += f.sent.Load()
		received += f.received.Load()
	}
	return sent, received
}

// record keeps r, a refusal only within the refusals' rate.
func (b *Boundary) record(r Record) {
	if b.cfg.Log == nil {
		return
	}
	if r.Verdict == VerdictDeny && r.Proto != ProtoDNS {
		n, ok := b.ref.take()
		if !ok {
			return
		}
		r.Suppressed = n
	}
	b.cfg.Log.Record(r)
}

// Close ends every open connection and the stack. Safe to call more than
// once.
func (b *Boundary) Close() {
	b.once.Do(func() {
		b.mu.Lock()
		b.closed = true
		fs := make([]*flow, 0, len(b.flows))
		for f := range b.flows {
			fs = append(fs, f)
		}
		b.mu.Unlock()
		b.cancel()
		for _, f := range fs {
			f.close()
		}
		if b.stop != nil {
			b.stop()
		}
		b.wg.Wait()
	})
}

// contextAfter runs fn once the boundary closes; the returned function
// stops that.
func contextAfter(b *Boundary, fn func()) func() bool {
	return context.AfterFunc(b.ctx, fn)
}
