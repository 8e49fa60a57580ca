package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// API is what Forward needs of the envlease API (*client.Client has it).
type API interface {
	GetEnvironment(ctx context.Context, id string) (domain.Environment, error)
	CreateTunnel(ctx context.Context, id string) (client.TunnelTicket, error)
}

// EventKind says what happened.
type EventKind string

const (
	// Listening: an export's listen address is open (Service, Listen, Target).
	Listening EventKind = "listening"
	// Forwarding: every listener is open and the first tunnel is up
	// (Exports: what is forwarded); connections are carried from now on.
	Forwarding EventKind = "forwarding"
	// Connected: a tunnel is up (Expires: its ticket's end). Renewed: a new
	// tunnel on a fresh ticket took over; streams on the old one finish there.
	Connected EventKind = "connected"
	Renewed   EventKind = "renewed"
	// Retrying: the tunnel dropped or could not be opened or renewed (Err);
	// another try follows after Wait. The listeners stay open meanwhile.
	Retrying EventKind = "retrying"
	// StreamFailed: one accepted connection could not be carried (Err).
	StreamFailed EventKind = "stream-failed"
	// Paused: the environment was paused (it went idle); the listeners stay
	// open, and the next connection wakes it (docs/environments.md, "Pause
	// on idle, wake on use").
	Paused EventKind = "paused"
)

// Event is something Forward tells its caller.
type Event struct {
	Kind                    EventKind
	Service, Listen, Target string
	Expires                 time.Time
	Wait                    time.Duration
	Err                     error
	Exports                 []domain.EnvExport
}

// Options tune Forward; the zero value is what the CLI uses.
type Options struct {
	// Dial opens the tunnel's connection (default UpgradeDialer(nil)).
	Dial Dialer
	// Clock tells the time renewals are planned by (default the system's).
	Clock clock.Clock
	// RenewBefore is how long before its ticket ends a tunnel is replaced
	// (default a fifth of the ticket's life, at least 5 s).
	RenewBefore time.Duration
	// MinBackoff and MaxBackoff bound the waits between failed tries
	// (default 250 ms and 10 s).
	MinBackoff, MaxBackoff time.Duration
	// SessionWait bounds how long an accepted connection waits for a
	// tunnel while one is being redialled (default 30 s).
	SessionWait time.Duration
}

// maxRefusals is how many times in a row the agent may refuse fresh
// tickets before Forward gives up: one refusal may be a node that just
// re-registered, several mean the node cannot accept this service's tickets.
const maxRefusals = 3

// Forward listens on the listen address of each of the environment's
// exports and carries every connection accepted there to the export's target
// through the node that runs the environment, until ctx ends (then it
// returns ctx's error) or the tunnel can no longer be had (the environment
// stopped, the ticket is refused): then it returns why. It renews the ticket
// before it ends, and redials a dropped tunnel with backoff, without closing
// the listeners. onEvent (may be nil) is called from Forward's goroutines,
// one call at a time.
func Forward(ctx context.Context, api API, envID string, onEvent func(Event), opt Options) error {
	f := &forwarder{api: api, env: envID, opt: opt.withDefaults(), changed: make(chan struct{}), wanted: make(chan struct{}, 1)}
	var emitMu sync.Mutex
	f.emit = func(e Event) {
		if onEvent != nil {
			emitMu.Lock()
			defer emitMu.Unlock()
			onEvent(e)
		}
	}
	return f.run(ctx)
}

func (o Options) withDefaults() Options {
	if o.Dial == nil {
		o.Dial = UpgradeDialer(nil)
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Second
	}
	if o.SessionWait <= 0 {
		o.SessionWait = 30 * time.Second
	}
	return o
}

type forwarder struct {
	api  API
	env  string
	opt  Options
	emit func(Event)

	// paused is set while the environment is paused: a held tunnel is not
	// renewed (a renewal's ticket would wake it), and a connection waits
	// for its wake (wanted) rather than SessionWait alone.
	paused atomic.Bool
	wanted chan struct{}

	mu  sync.Mutex
	cur *Session // nil while there is none
	// changed is closed (and replaced) whenever cur changes.
	changed chan struct{}
}

// export is one listener and where its connections go.
type export struct {
	domain.EnvExport
	ln net.Listener
}

func (f *forwarder) run(ctx context.Context) error {
	e, err := f.api.GetEnvironment(ctx, f.env)
	if err != nil {
		return err
	}
	switch {
	case e.State == domain.StatePaused:
		// Forwarding is use: the first ticket wakes it, and the API and
		// the client wait for it (up to client.MaxWake).
		f.emit(Event{Kind: Paused})
	case !e.State.Live():
		// Said as the API says it to a tunnel ticket: it will never be
		// ready again, so "wait" would be the wrong advice.
		return fmt.Errorf("environment %s is %s: it no longer runs, so there is nothing to tunnel to", e.ID, e.State)
	case e.State != domain.StateReady && e.Resumed == nil:
		return fmt.Errorf("environment %s is %s: its exports can be forwarded once it is ready (envlease lease --wait waits for that)", e.ID, e.State)
	}
	exports, err := listen(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		for _, x := range exports {
			x.ln.Close()
		}
		f.setCurrent(nil)
		wg.Wait()
	}()

	exp, err := f.connect(ctx)
	if err != nil {
		return err
	}
	f.emit(Event{Kind: Connected, Expires: exp})
	failed := make(chan error, len(exports))
	forwarded := make([]domain.EnvExport, 0, len(exports))
	for _, x := range exports {
		f.emit(Event{Kind: Listening, Service: x.Service, Listen: x.Listen, Target: x.Target})
		forwarded = append(forwarded, x.EnvExport)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.accept(ctx, x, &wg); err != nil {
				failed <- err
			}
		}()
	}
	f.emit(Event{Kind: Forwarding, Exports: forwarded})
	for {
		err := f.maintain(ctx, exp, failed)
		if err != nil {
			return err
		}
		if err := f.awaitUse(ctx, failed); err != nil {
			return err
		}
		exp, err = f.reconnect(ctx)
		f.paused.Store(false)
		if err != nil {
			return err
		}
	}
}

// isPaused reads whether the environment is paused (false when it cannot
// be read: the redial that follows says why).
func (f *forwarder) isPaused(ctx context.Context) bool {
	e, err := f.api.GetEnvironment(ctx, f.env)
	return err == nil && e.State == domain.StatePaused
}

// awaitUse returns at once unless the environment is paused; then it waits
// for a connection to need a tunnel, whose ticket wakes it (the API waits
// and the client asks again while it is waking, up to client.MaxWake).
func (f *forwarder) awaitUse(ctx context.Context, failed <-chan error) error {
	if !f.isPaused(ctx) {
		return nil
	}
	f.paused.Store(true)
	f.emit(Event{Kind: Paused})
	// A want already there is a connection waiting: real use.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-failed:
		return err
	case <-f.wanted:
		return nil
	}
}

// listen opens every export's listen address, exactly as the lease gave it.
func listen(e domain.Environment) ([]export, error) {
	var out []export
	fail := func(err error) ([]export, error) {
		for _, x := range out {
			x.ln.Close()
		}
		return nil, err
	}
	for _, x := range e.Exports {
		if x.Listen == "" {
			return fail(fmt.Errorf("export %s of environment %s has no listen address: it was leased without a sandbox (envlease sandbox register, then lease again)", x.Service, e.ID))
		}
		if x.Target == "" {
			return fail(fmt.Errorf("export %s of environment %s has no target yet", x.Service, e.ID))
		}
		ln, err := net.Listen("tcp", x.Listen)
		if err != nil {
			return fail(fmt.Errorf("listen on %s for export %s: %w (is another port-forward of this environment running?)", x.Listen, x.Service, err))
		}
		out = append(out, export{EnvExport: x, ln: ln})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("environment %s has no exports to forward", e.ID)
	}
	return out, nil
}

// maintain watches the current tunnel: it renews it before its ticket ends
// and returns nil when it dropped (to be redialled), or an error that ends
// Forward.
func (f *forwarder) maintain(ctx context.Context, exp time.Time, failed <-chan error) error {
	backoff := f.opt.MinBackoff
	at := f.renewAt(exp)
	for {
		cur := f.current()
		if cur == nil {
			return nil
		}
		t := time.NewTimer(max(at.Sub(f.opt.Clock.Now()), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case err := <-failed:
			t.Stop()
			return err
		case <-cur.Done():
			t.Stop()
			f.swap(cur, nil)
			f.emit(Event{Kind: Retrying, Err: errors.New("the tunnel dropped")})
			return nil
		case <-t.C:
		}
		if f.isPaused(ctx) {
			// A renewal's ticket would wake it: let the tunnel go, and
			// wait for a connection (awaitUse).
			f.swap(cur, nil)
			go retire(cur)
			return nil
		}
		next, nexp, err := f.open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if permanent(err) {
				return err
			}
			// The old tunnel serves on meanwhile.
			f.emit(Event{Kind: Retrying, Err: fmt.Errorf("renew the tunnel: %w", err), Wait: backoff})
			at = f.opt.Clock.Now().Add(backoff)
			backoff = min(backoff*2, f.opt.MaxBackoff)
			continue
		}
		backoff = f.opt.MinBackoff
		f.swap(cur, next)
		at = f.renewAt(nexp)
		f.emit(Event{Kind: Renewed, Expires: nexp})
		go retire(cur)
	}
}

// renewAt is when a tunnel whose ticket ends at exp is replaced.
func (f *forwarder) renewAt(exp time.Time) time.Time {
	before := f.opt.RenewBefore
	if before <= 0 {
		before = max(exp.Sub(f.opt.Clock.Now())/5, 5*time.Second)
	}
	return exp.Add(-before)
}

// retire closes a replaced tunnel once its last stream has ended.
func retire(s *Session) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for s.Streams() > 0 {
		select {
		case <-s.Done():
			return
		case <-t.C:
		}
	}
	s.Close()
}

// connect opens the first tunnel: any failure ends Forward, so a wrong
// environment or an unreachable node is said at once.
func (f *forwarder) connect(ctx context.Context) (time.Time, error) {
	s, exp, err := f.open(ctx)
	if err != nil {
		return time.Time{}, err
	}
	f.setCurrent(s)
	return exp, nil
}

// reconnect redials with backoff until a tunnel is up, ctx ends, or the
// failure is one that retrying cannot mend.
func (f *forwarder) reconnect(ctx context.Context) (time.Time, error) {
	backoff := f.opt.MinBackoff
	refusals := 0
	for {
		s, exp, err := f.open(ctx)
		if err == nil {
			f.setCurrent(s)
			f.emit(Event{Kind: Connected, Expires: exp})
			return exp, nil
		}
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		if permanent(err) {
			return time.Time{}, err
		}
		if IsRefusal(err) {
			if refusals++; refusals >= maxRefusals {
				return time.Time{}, err
			}
		} else {
			refusals = 0
		}
		f.emit(Event{Kind: Retrying, Err: err, Wait: backoff})
		if err := f.sleep(ctx, backoff); err != nil {
			return time.Time{}, err
		}
		backoff = min(backoff*2, f.opt.MaxBackoff)
	}
}

// open gets a fresh ticket and dials a tunnel with it.
func (f *forwarder) open(ctx context.Context) (*Session, time.Time, error) {
	tk, err := f.api.CreateTunnel(ctx, f.env)
	if err != nil {
		return nil, time.Time{}, err
	}
	s, err := Dial(ctx, f.opt.Dial, tk.URL, tk.Ticket)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("open the tunnel at %s: %w", tk.URL, err)
	}
	return s, tk.Expires, nil
}

// permanent reports whether err is the API saying the tunnel cannot be had
// at all: the environment is unknown, ended or not ready (404, 409, 410), or
// the token may not (401, 403). Network failures, 5xx and 429 are worth
// another try.
func permanent(err error) bool {
	switch client.StatusOf(err) {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusConflict, http.StatusGone, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

func (f *forwarder) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (f *forwarder) current() *Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func (f *forwarder) setCurrent(s *Session) {
	f.mu.Lock()
	old := f.cur
	f.cur = s
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	if s == nil && old != nil {
		old.Close()
	}
}

// swap replaces old by next as the current tunnel, if old still is it.
func (f *forwarder) swap(old, next *Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != old {
		return
	}
	f.cur = next
	close(f.changed)
	f.changed = make(chan struct{})
}

// session returns the current tunnel, waiting up to SessionWait for one
// while it is being redialled.
func (f *forwarder) session(ctx context.Context) (*Session, error) {
	wait := f.opt.SessionWait
	if f.paused.Load() {
		wait += client.MaxWake // it is woken for this connection
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		f.mu.Lock()
		s, changed := f.cur, f.changed
		f.mu.Unlock()
		if s != nil && !s.mux.IsClosed() {
			return s, nil
		}
		select {
		case f.wanted <- struct{}{}: // a paused environment's forwarder waits for this
		default:
		}
		if f.paused.Load() && wait == f.opt.SessionWait {
			wait += client.MaxWake
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, errors.New("no tunnel to the node: it is being redialled")
		case <-changed:
		}
	}
}

// accept serves one listener until ctx ends.
func (f *forwarder) accept(ctx context.Context, x export, wg *sync.WaitGroup) error {
	for {
		c, err := x.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept on %s: %w", x.Listen, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.carry(ctx, c, x)
		}()
	}
}

// carry forwards one accepted connection. A stream that cannot be opened on
// the current tunnel because it just dropped is tried once more on the next.
func (f *forwarder) carry(ctx context.Context, c net.Conn, x export) {
	var st net.Conn
	var err error
	for try := 0; try < 2; try++ {
		var s *Session
		if s, err = f.session(ctx); err != nil {
			break
		}
		if st, err = s.Open(ctx, x.Target); err == nil {
			break
		}
		var se *StreamError
		if errors.As(err, &se) && try == 0 && f.isPaused(ctx) {
			// Paused since the tunnel opened: its node no longer runs it.
			// Let this tunnel go; the next wakes it (awaitUse).
			f.paused.Store(true)
			s.Close()
			continue
		}
		if errors.As(err, &se) || ctx.Err() != nil {
			break
		}
		// The tunnel did not answer: take it as dead, which makes the
		// maintainer redial, and try once more on the next.
		s.Close()
	}
	if err != nil {
		c.Close()
		if ctx.Err() == nil {
			f.emit(Event{Kind: StreamFailed, Service: x.Service, Listen: x.Listen, Target: x.Target, Err: err})
		}
		return
	}
	stop := context.AfterFunc(ctx, func() { c.Close(); st.Close() })
	defer stop()
	Pipe(c, st)
}
