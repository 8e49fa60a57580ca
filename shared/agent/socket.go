package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// Transports a node can speak the node protocol over (Config.Transport).
const (
	// TransportAuto uses the WebSocket when registration names one (or
	// Config.SocketURL does) and it opens; otherwise HTTP.
	TransportAuto = "auto"
	// TransportWebSocket insists on the WebSocket: opening it is retried.
	TransportWebSocket = "websocket"
	// TransportHTTP heartbeats and long-polls claims over HTTP.
	TransportHTTP = "http"
)

// Reconnection backoff of the node protocol's WebSocket: doubled per failed
// attempt from the first to the last, each wait drawn at random between
// half and all of it, so nodes cut off together do not come back together.
const (
	reconnectFirst = 200 * time.Millisecond
	reconnectMax   = 30 * time.Second
	// callTimeout bounds the wait for a request's answer.
	callTimeout = 30 * time.Second
	// roomRecheck is how often a node short of disk looks again whether it
	// has room to claim; maxShortOffers bounds the environments it
	// remembers were offered meanwhile.
	roomRecheck    = 2 * time.Second
	maxShortOffers = 1024
	// maxQueuedOffers bounds the offers waiting for the claim loop, which
	// takes them in batches; after one is dropped the next claim asks for
	// pending ones up to the room, which finds it.
	maxQueuedOffers = 1024
	// pingEvery is how often a node with nothing to send pings its
	// connection (a WebSocket ping frame, answered by the peer itself: no
	// message reaches a handler), and pingTimeout how long it waits for the
	// pong. A peer that never answers pings is left to the deadline beats.
	pingEvery   = 30 * time.Second
	pingTimeout = 10 * time.Second
)

var errNoAnswer = errors.New("node protocol: no answer")

// socketClient is one open WebSocket of the node protocol.
type socketClient struct {
	ws      *websocket.Conn
	seq     atomic.Int64
	mu      sync.Mutex
	pending map[string]chan nodes.Message
	// offers carries the environment ids of offers (possibly ""), stops
	// those of stop messages, and done is closed when the connection has
	// ended (err says why).
	offers chan string
	// dropped is set when an offer found the queue full: the next claim
	// must sweep, as the claims of queued offers name only those.
	dropped atomic.Bool
	stops   chan []string
	// checkpoint takes a checkpoint order (it returns at once).
	checkpoint func(nodes.Message)
	// network takes an environment's new network layer (it returns at once).
	network func(nodes.Message)
	// previews takes a revocation of preview links (preview_endpoint.go).
	previews func(nodes.Message)
	done     chan struct{}
	err      error
}

func (a *Agent) dialSocket(ctx context.Context, url string) (*socketClient, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	header := http.Header{}
	header.Set("Authorization", "Bearer "+a.cfg.Token)
	header.Set("User-Agent", Version)
	ws, res, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: a.http, HTTPHeader: header})
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols {
			return nil, &APIError{Status: res.StatusCode, Message: "opening the node protocol's WebSocket was refused"}
		}
		return nil, err
	}
	ws.SetReadLimit(16 << 20)
	c := &socketClient{ws: ws, pending: map[string]chan nodes.Message{}, offers: make(chan string, cmp.Or(a.cfg.queuedOffers, maxQueuedOffers)), stops: make(chan []string, 64), done: make(chan struct{})}
	c.checkpoint = func(m nodes.Message) { a.checkpointOrdered(ctx, m.Node, m.Environment, m.Checkpoint) }
	c.network = func(m nodes.Message) { a.networkPushed(m.Environment, m.Network) }
	c.previews = a.previewsRevoked
	go c.read(ctx)
	return c, nil
}

// read passes answers to their callers and offers to the claim loop until
// the connection ends.
func (c *socketClient) read(ctx context.Context) {
	defer close(c.done)
	for {
		_, b, err := c.ws.Read(ctx)
		if err != nil {
			c.err = err
			return
		}
		var m nodes.Message
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if m.Type == nodes.MsgOffer {
			id := ""
			if len(m.Environments) > 0 {
				id = m.Environments[0]
			}
			select {
			case c.offers <- id:
			default: // the claim loop has enough to do; its next claim sweeps
				c.dropped.Store(true)
			}
			continue
		}
		if m.Type == nodes.MsgCheckpoint {
			if c.checkpoint != nil {
				c.checkpoint(m)
			}
			continue
		}
		if m.Type == nodes.MsgNetwork {
			if c.network != nil {
				c.network(m)
			}
			continue
		}
		if m.Type == nodes.MsgPreviews {
			if c.previews != nil {
				c.previews(m)
			}
			continue
		}
		if m.Type == nodes.MsgStop {
			select {
			case c.stops <- m.Environments:
			default: // the stop job sends it again
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

func (c *socketClient) close() { _ = c.ws.Close(websocket.StatusNormalClosure, "") }

// call sends a request and waits for its answer; an error answer is an
// *APIError with the status the HTTP endpoint would have given.
func (c *socketClient) call(ctx context.Context, m nodes.Message) (nodes.Message, error) {
	m.ID = strconv.FormatInt(c.seq.Add(1), 10)
	ch := make(chan nodes.Message, 1)
	c.mu.Lock()
	c.pending[m.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, m.ID)
		c.mu.Unlock()
	}()
	b, err := json.Marshal(m)
	if err != nil {
		return nodes.Message{}, err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return nodes.Message{}, err
	}
	t := time.NewTimer(callTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.Type == nodes.MsgError && r.Error != nil {
			return r, &APIError{Status: r.Error.Status, Code: r.Error.Code, Message: r.Error.Message}
		}
		return r, nil
	case <-c.done:
		return nodes.Message{}, fmt.Errorf("%w: the connection ended: %v", errNoAnswer, c.err)
	case <-ctx.Done():
		return nodes.Message{}, ctx.Err()
	case <-t.C:
		return nodes.Message{}, fmt.Errorf("%w within %s", errNoAnswer, callTimeout)
	}
}

// socketURL is where this node speaks the node protocol, "" for HTTP.
func (a *Agent) socketURL(reg nodes.Registered) string {
	switch a.cfg.Transport {
	case TransportHTTP:
		return ""
	}
	if a.cfg.SocketURL != "" {
		return a.cfg.SocketURL
	}
	return reg.SocketURL
}

// jittered returns a wait between half and all of d.
func jittered(d time.Duration) time.Duration {
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// socketSession serves a registered node over the node protocol: it
// resumes the node on the connection (hello), heartbeats with what changed,
// claims when offered work, and when the connection drops reconnects with
// backoff and jitter. It returns errLost when the node is no longer active.
func (a *Agent) socketSession(ctx context.Context, reg nodes.Registered, url string, first *socketClient, interval time.Duration) error {
	sock := first
	for {
		err := a.serveSocket(ctx, reg.Node.ID, sock, interval)
		a.sock.Store(nil)
		sock.close()
		if errors.Is(err, errLost) || refused(err) || ctx.Err() != nil {
			return err
		}
		a.log.Warn("node protocol connection dropped; reconnecting", "err", err)
		backoff := reconnectFirst
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(jittered(backoff)):
			}
			if sock, err = a.dialSocket(ctx, url); err == nil {
				break
			}
			if refused(err) {
				return err // revoked while disconnected: reconnecting cannot help
			}
			a.log.Warn("node protocol reconnect failed", "err", err, "retry_in", min(backoff*2, reconnectMax).String())
			backoff = min(backoff*2, reconnectMax)
		}
		a.reconnects.Add(1)
	}
}

// serveSocket runs one connection until it ends.
func (a *Agent) serveSocket(ctx context.Context, node string, sock *socketClient, interval time.Duration) error {
	hello, err := sock.call(ctx, nodes.Message{Type: nodes.MsgHello, Node: node})
	if s := statusOf(err); s == http.StatusGone || s == http.StatusNotFound {
		return errLost
	}
	if err != nil {
		return err
	}
	if hello.Registered != nil {
		a.setTemplates(hello.Registered.Templates)
	}
	a.sock.Store(sock)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	claimErr := make(chan error, 1)
	go func() { claimErr <- a.socketClaims(cctx, node, sock) }()

	var (
		deadline time.Time
		sent     map[string]bool // nil: nothing answered on this connection yet
		lastFull *bool
		// lastShort is what the service last heard of the disk.
		lastShort *bool
		// beatDue is when the deadline is next due (local monotonic time,
		// from the last answer's beatIn); zero: beat every interval.
		beatDue time.Time
		// pinged is when the connection was last pinged or beat on; pings
		// stops pinging a peer that did not answer one.
		pinged = time.Now()
		pings  = true
	)
	t := time.NewTicker(interval)
	defer t.Stop()
	beat := func() error {
		epoch := a.claimEpoch.Load()
		inFlight := a.claiming.Load() > 0
		ids := a.ids()
		cur := make(map[string]bool, len(ids))
		var changed []string
		for _, id := range ids {
			cur[id] = true
			if !sent[id] {
				changed = append(changed, id)
			}
		}
		for id := range sent {
			if !cur[id] {
				changed = append(changed, id)
			}
		}
		// A node short of disk says so, and the service wakes it only when
		// every node it could choose is short; it also counts as full, for
		// a service that reads only that.
		short := a.noRoom() != nil
		full := len(ids) >= a.cfg.Capacity || short
		m := nodes.Message{Type: nodes.MsgHeartbeat, Node: node, Changed: changed, Running: len(ids), Deadline: deadline,
			Active: a.activeEnvs(), Opened: a.previewsOpened()}
		if lastFull == nil || *lastFull != full {
			m.Full = &full
		}
		if lastShort == nil || *lastShort != short {
			m.Short = &short
		}
		if beatDue.IsZero() || !time.Now().Before(beatDue) {
			// A beat that writes the deadline: the service checks the
			// network layers applied here against the environments'.
			m.NetVersions = a.netVersions()
		}
		// Nothing to report and the deadline not due: no message. Stops
		// come as stop messages; a ping now and then checks the
		// connection without invoking anything.
		if sent != nil && len(changed) == 0 && len(m.Active) == 0 && len(m.Opened) == 0 && m.Full == nil && m.Short == nil && !beatDue.IsZero() && time.Now().Before(beatDue) {
			if !pings || time.Since(pinged) < pingEvery {
				return nil
			}
			pinged = time.Now()
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := sock.ws.Ping(pctx)
			cancel()
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, context.DeadlineExceeded):
				pings = false
				a.log.Info("the node protocol's peer does not answer pings; relying on the deadline beats")
			default:
				return fmt.Errorf("ping: %w", err)
			}
			return nil
		}
		pinged = time.Now()
		r, err := sock.call(ctx, m)
		if err != nil {
			a.unreport(m.Active)
		}
		if s := statusOf(err); s == http.StatusGone || s == http.StatusNotFound {
			return errLost
		}
		if errors.Is(err, errNoAnswer) {
			// A connection that answers nothing may be dead without knowing
			// it: stops could not reach the node on it.
			return err
		}
		if err != nil || r.Beat == nil {
			a.log.Warn("heartbeat failed", "err", err)
			return nil
		}
		deadline, sent, lastFull, lastShort = r.Beat.Deadline, cur, &full, &short
		beatDue = time.Time{}
		if r.Beat.BeatIn > 0 {
			beatDue = time.Now().Add(r.Beat.BeatIn.Std())
		}
		if len(r.Beat.Templates) > 0 {
			a.setTemplates(r.Beat.Templates)
		}
		claimRaced := inFlight || a.claiming.Load() > 0 || a.claimEpoch.Load() != epoch
		a.applyStates(ctx, node, changed, r.Beat.Environments, claimRaced)
		return nil
	}
	if err := beat(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sock.done:
			return fmt.Errorf("connection ended: %v", sock.err)
		case err := <-claimErr:
			if err != nil {
				return err
			}
			claimErr = nil
		case ids := <-sock.stops:
			a.stopPushed(ctx, node, ids)
		case <-t.C:
			if err := beat(); err != nil {
				return err
			}
		}
	}
}

// stopPushed acts on a stop message as on a heartbeat answer naming the
// environments stopping: tear down those it runs (each reports stopped when
// it is down), and report stopped at once those it does not.
func (a *Agent) stopPushed(ctx context.Context, node string, ids []string) {
	states := make([]nodes.EnvState, 0, len(ids))
	for _, id := range ids {
		states = append(states, nodes.EnvState{ID: id, State: domain.StateStopping})
	}
	a.applyStates(ctx, node, nil, states, false)
}

// socketClaims claims on the connection: once at the start (work may have
// waited for a node), then whenever an offer comes, and again after every
// environment it got (more may be pending), while there is capacity.
func (a *Agent) socketClaims(ctx context.Context, node string, sock *socketClient) error {
	want, env := true, ""
	// carry are offered environments a batch claim left out while it
	// claimed others (its answer had no room for them): the next claim
	// names them first.
	var carry []string
	// onWake: the service counted the node full, so an environment that
	// ends is a reason to claim again, offered or not.
	onWake := false
	// recheck: the node was short of disk, so look again a little later.
	// shortOffers are the environments offered while it was.
	recheck := false
	var shortOffers map[string]bool
	only := false
	// sweep: the next claim asks for pending ones up to the room even when
	// offers are queued. The first claim of a connection must: a lease
	// made while the node connected was offered to nobody when its offer
	// read the pool's connections before this one was recorded, and only
	// this claim finds it. Were offers that came meanwhile (right after the
	// hello) to make it a claim of just those, that lease would wait,
	// pending, for the re-offer job.
	sweep := true
	backoff := 200 * time.Millisecond
	for {
		if !want {
			var wake <-chan struct{}
			if onWake {
				wake = a.wake
			}
			var again <-chan time.Time
			if recheck {
				again = time.After(roomRecheck)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-sock.done:
				return nil
			case env = <-sock.offers:
			case <-wake:
			case <-again:
			}
			want, onWake, recheck = true, false, false
		}
		if a.count() >= a.cfg.Capacity {
			// Full: keep the wish, and claim when an environment ends.
			select {
			case <-ctx.Done():
				return nil
			case <-sock.done:
				return nil
			case <-a.wake:
			case <-time.After(time.Second):
			}
			continue
		}
		if a.noRoom() != nil {
			// Short of disk: claim nothing; the heartbeats say the node is
			// short, so offers go to any node that is not, full or not. An
			// environment offered here a second time found none that is
			// not short: it is claimed, and runEnv refuses it, so it fails
			// saying why rather than waiting, pending, for nobody.
			if env == "" || !shortOffers[env] {
				if env != "" {
					if len(shortOffers) >= maxShortOffers {
						shortOffers = nil
					}
					if shortOffers == nil {
						shortOffers = map[string]bool{}
					}
					shortOffers[env] = true
				}
				want, recheck, env = false, true, ""
				continue
			}
			delete(shortOffers, env)
			only = true // this one, to fail it; never another in its place
		} else {
			shortOffers = nil
		}
		if h := a.cfg.beforeSocketClaim; h != nil {
			h(func() int { return len(sock.offers) })
		}
		if sock.dropped.Swap(false) {
			sweep = true
		}
		a.claiming.Add(1)
		a.claimEpoch.Add(1)
		m := nodes.Message{Type: nodes.MsgClaim, Node: node, Environment: env, Only: only}
		// A crowd is claimed in batches: the environments offered so far,
		// as many as there is room for, in one message (the service makes
		// up for any another node took with pending ones). Without offers
		// (after a full batch), and at the start of a connection whatever
		// was offered (sweep), the claim asks for pending ones up to the
		// room, the offered ones first. A claim to refuse (only) stays a
		// single one.
		room := min(a.cfg.Capacity-a.count(), nodes.MaxClaimBatch)
		if !only {
			m.Environment = ""
			m.Environments = append(m.Environments, carry...)
			carry = nil
			if env != "" {
				m.Environments = append(m.Environments, env)
			}
		drain:
			for len(m.Environments) < room {
				select {
				case id := <-sock.offers:
					if id != "" {
						m.Environments = append(m.Environments, id)
					}
				default:
					break drain
				}
			}
			m.Max = room
			if len(m.Environments) > 0 && !sweep {
				m.Max = len(m.Environments)
			}
		}
		r, err := sock.call(ctx, m)
		only = false
		claimed := r.Claims
		if err == nil && r.Claimed != nil {
			claimed = append(claimed, *r.Claimed) // a service that claims one at a time
		}
		if err == nil {
			for i := range claimed {
				a.start(ctx, node, &claimed[i])
			}
		}
		a.claiming.Add(-1)
		env = ""
		switch s := statusOf(err); {
		case err == nil:
			// A full claim of pending ones (or a single claim's one) may
			// have left more pending: claim again at once. What is offered
			// later comes as offers.
			if !m.Only {
				sweep = false
			}
			// An offer dropped while this claim was made up or answered
			// brings no wake of its own: claim again, sweeping.
			want = r.Claimed != nil || m.Max > len(m.Environments) && len(claimed) >= m.Max || sock.dropped.Load()
			if len(m.Environments) > 0 && len(claimed) > 0 && len(claimed) < len(m.Environments) {
				// Some offered ones were left out: another node has them,
				// or the answer had no room. Name them again while claims
				// make progress; those taken elsewhere are simply not had.
				got := map[string]bool{}
				for _, c := range claimed {
					got[c.Environment.ID] = true
				}
				for _, id := range m.Environments {
					if !got[id] {
						carry = append(carry, id)
					}
				}
				want = true
			}
			backoff = 200 * time.Millisecond
		case ctx.Err() != nil:
			return nil
		case s == http.StatusGone || s == http.StatusNotFound:
			return errLost
		case refused(err):
			return err
		case s == http.StatusConflict:
			want, onWake = false, true // at capacity by the service's count
		default:
			a.log.Warn("claim failed", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-sock.done:
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
		}
	}
}
