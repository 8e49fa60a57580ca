package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// Limits of the tunnel endpoint.
const (
	// DefaultMaxStreams bounds the connections one tunnel carries at once.
	DefaultMaxStreams = 256
	// DefaultMaxTunnels bounds the tunnels an agent serves at once.
	DefaultMaxTunnels = 1024
	// DefaultMaxTunnelsPerEnv bounds the tunnels (and exec sessions, which
	// are tunnels too) to one environment at once, so that one
	// environment's tickets cannot take all of the node's.
	DefaultMaxTunnelsPerEnv = 128
	// tunnelDialTimeout bounds the connection to a target.
	tunnelDialTimeout = 10 * time.Second
	// tunnelCheck is how often an open tunnel is checked against its
	// environment (gone: the tunnel closes) and its ticket (expired and
	// carrying nothing: it closes).
	tunnelCheck = 5 * time.Second
)

// TunnelIdentity is who an agent is, as tickets must name it.
type TunnelIdentity struct {
	Org, Node string
	Key       []byte
}

// TunnelConfig configures a tunnel endpoint.
type TunnelConfig struct {
	// Identity is the agent's current identity; false before it has
	// registered (tunnels are then refused with 503).
	Identity func() (TunnelIdentity, bool)
	// Targets returns the export targets of an environment the agent runs
	// and that is ready; false for any other environment.
	Targets func(env string) ([]string, bool)
	// Clock judges ticket expiry (default the system's).
	Clock clock.Clock
	// Dial connects to a target (default a net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialEnv, when set, connects to a target of an environment instead of
	// Dial: the agent reaches it inside the environment's network namespace.
	DialEnv func(ctx context.Context, env, target string) (net.Conn, error)
	Log     *slog.Logger
	// MaxStreams, MaxTunnels and MaxTunnelsPerEnv default to
	// DefaultMaxStreams, DefaultMaxTunnels and DefaultMaxTunnelsPerEnv.
	MaxStreams, MaxTunnels, MaxTunnelsPerEnv int
	// CheckEvery overrides how often open tunnels are checked (tests).
	CheckEvery time.Duration
	// Opens serve the sessions of tickets that open something other than
	// a tunnel, by what they open (ticket.Claims.Open): the session is
	// theirs once the ticket is accepted. A ticket that opens anything
	// else is refused, and one for a tunnel opens nothing else.
	Opens map[string]OpenFunc
}

// OpenFunc serves the session of a ticket that opens something other than
// a tunnel; the session ends when it returns.
type OpenFunc func(ctx context.Context, sess *yamux.Session, c ticket.Claims, log *slog.Logger)

// TunnelHandler serves tunnels at tunnel.Path: it upgrades a request whose
// ticket it accepts (to tunnel.Protocol, or to a WebSocket), runs the
// server side of a yamux session on it, and connects each stream to the
// target it names if that target is one of the ticket's and one of the
// environment's exports now. It never connects anywhere else.
type TunnelHandler struct {
	cfg     TunnelConfig
	tunnels atomic.Int64

	mu       sync.Mutex
	sessions map[*yamux.Session]struct{}
	closed   bool
	// perEnv counts the tunnels open to each environment.
	perEnv map[string]int
}

// NewTunnelHandler returns a tunnel endpoint.
func NewTunnelHandler(cfg TunnelConfig) *TunnelHandler {
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: tunnelDialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxTunnels <= 0 {
		cfg.MaxTunnels = DefaultMaxTunnels
	}
	if cfg.MaxTunnelsPerEnv <= 0 {
		cfg.MaxTunnelsPerEnv = DefaultMaxTunnelsPerEnv
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = tunnelCheck
	}
	return &TunnelHandler{cfg: cfg, sessions: map[*yamux.Session]struct{}{}, perEnv: map[string]int{}}
}

// refusal is a tunnel refused at the upgrade.
type refusal struct {
	status int
	msg    string
}

func (h *TunnelHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != tunnel.Path {
		writeRefusal(w, refusal{http.StatusNotFound, "not found: tunnels are served at " + tunnel.Path})
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeRefusal(w, refusal{http.StatusMethodNotAllowed, "a tunnel is a WebSocket: GET with an upgrade"})
		return
	}
	c, ref := h.authorize(r)
	if ref != nil {
		h.cfg.Log.Info("tunnel refused", "status", ref.status, "reason", ref.msg, "from", r.RemoteAddr)
		writeRefusal(w, *ref)
		return
	}
	if h.tunnels.Add(1) > int64(h.cfg.MaxTunnels) {
		h.tunnels.Add(-1)
		writeRefusal(w, refusal{http.StatusServiceUnavailable, fmt.Sprintf("the node serves %d tunnels already; retry later", h.cfg.MaxTunnels)})
		return
	}
	defer h.tunnels.Add(-1)
	if !h.enter(c.Env) {
		writeRefusal(w, refusal{http.StatusServiceUnavailable, fmt.Sprintf("environment %s has %d tunnels and sessions open already; close some first", c.Env, h.cfg.MaxTunnelsPerEnv)})
		return
	}
	defer h.leave(c.Env)
	conn, err := tunnel.Accept(w, r)
	if err != nil {
		return // Accept has answered
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sess, err := yamux.Server(tunnel.MuxConn(conn), tunnel.MuxConfig())
	if err != nil {
		conn.Close()
		return
	}
	if !h.track(sess) {
		sess.Close()
		return
	}
	defer h.untrack(sess)
	log := h.cfg.Log.With("environment", c.Env, "from", r.RemoteAddr)
	if c.Open != "" {
		go h.watch(sess, c, log)
		h.cfg.Opens[c.Open](ctx, sess, c, log.With("open", c.Open))
		return
	}
	log.Info("tunnel opened", "ticketExpires", c.Expires())
	go h.watch(sess, c, log)
	h.serve(ctx, sess, c, log)
	log.Info("tunnel closed")
}

// enter counts a tunnel to env, unless it has MaxTunnelsPerEnv already.
func (h *TunnelHandler) enter(env string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perEnv[env] >= h.cfg.MaxTunnelsPerEnv {
		return false
	}
	h.perEnv[env]++
	return true
}

func (h *TunnelHandler) leave(env string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perEnv[env]--; h.perEnv[env] <= 0 {
		delete(h.perEnv, env)
	}
}

// authorize checks the upgrade's ticket, offline: signed with this node's
// key, not expired, naming this node and organization and an environment
// the agent runs and that is ready.
func (h *TunnelHandler) authorize(r *http.Request) (ticket.Claims, *refusal) {
	tk, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tk) == "" {
		return ticket.Claims{}, &refusal{http.StatusUnauthorized, "a tunnel takes a ticket (POST /v1/environments/{id}/tunnel) as Authorization: Bearer <ticket>"}
	}
	id, ok := h.cfg.Identity()
	if !ok {
		return ticket.Claims{}, &refusal{http.StatusServiceUnavailable, "the node is not registered yet; retry shortly"}
	}
	c, err := ticket.Verify(id.Key, strings.TrimSpace(tk), h.cfg.Clock.Now())
	if err != nil {
		return c, &refusal{http.StatusUnauthorized, err.Error()}
	}
	switch {
	case c.Org != id.Org:
		return c, &refusal{http.StatusForbidden, "the ticket is for another organization"}
	case c.Node != id.Node:
		return c, &refusal{http.StatusForbidden, "the ticket is for node " + c.Node + ", not this one"}
	}
	if c.Open != "" && h.cfg.Opens[c.Open] == nil {
		return c, &refusal{http.StatusForbidden, fmt.Sprintf("the ticket opens %q, which this node does not serve", c.Open)}
	}
	if _, ok := h.cfg.Targets(c.Env); !ok {
		return c, &refusal{http.StatusForbidden, "environment " + c.Env + " is not running on this node"}
	}
	return c, nil
}

func writeRefusal(w http.ResponseWriter, ref refusal) {
	if ref.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(ref.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": ref.msg})
}

func (h *TunnelHandler) serve(ctx context.Context, sess *yamux.Session, c ticket.Claims, log *slog.Logger) {
	var active atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if active.Add(1) > int64(h.cfg.MaxStreams) {
				active.Add(-1)
				refuseStream(st, fmt.Sprintf("the tunnel carries %d connections already; close some or open another tunnel", h.cfg.MaxStreams))
				return
			}
			defer active.Add(-1)
			h.stream(ctx, st, c, log)
		}()
	}
}

// stream connects one stream to the target it names, if it may.
func (h *TunnelHandler) stream(ctx context.Context, st *yamux.Stream, c ticket.Claims, log *slog.Logger) {
	_ = st.SetReadDeadline(time.Now().Add(tunnel.HeaderTimeout))
	r := bufio.NewReaderSize(st, 4096)
	var req tunnel.Request
	if err := tunnel.ReadLine(r, &req); err != nil {
		refuseStream(st, "the stream must start with one line {\"target\": \"host:port\"}")
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	if why := h.refuseTarget(c, req.Target); why != "" {
		log.Info("tunnel connection refused", "target", req.Target, "reason", why)
		refuseStream(st, why)
		return
	}
	var (
		conn net.Conn
		err  error
	)
	if h.cfg.DialEnv != nil {
		dctx, cancel := context.WithTimeout(ctx, tunnelDialTimeout)
		conn, err = h.cfg.DialEnv(dctx, c.Env, req.Target)
		cancel()
	} else {
		conn, err = h.cfg.Dial(ctx, "tcp", req.Target)
	}
	if err != nil {
		refuseStream(st, "cannot connect to "+req.Target+": "+dialReason(err))
		return
	}
	_ = st.SetWriteDeadline(time.Now().Add(tunnel.HeaderTimeout))
	if err := tunnel.WriteLine(st, tunnel.Reply{OK: true}); err != nil {
		conn.Close()
		st.Close()
		return
	}
	_ = st.SetWriteDeadline(time.Time{})
	tunnel.Pipe(tunnel.NewBufConn(st, r), conn)
}

// refuseTarget says why a stream may not reach target, or "" when it may:
// the ticket must still be valid and name the target, and the target must
// be one of the environment's exports now (a ticket outlives nothing).
func (h *TunnelHandler) refuseTarget(c ticket.Claims, target string) string {
	if !c.Valid(h.cfg.Clock.Now()) {
		return "the tunnel's ticket has expired; open a new tunnel with a new ticket"
	}
	if !c.Allows(target) {
		return fmt.Sprintf("target %q is not one of the ticket's", target)
	}
	cur, ok := h.cfg.Targets(c.Env)
	if !ok {
		return "environment " + c.Env + " no longer runs on this node"
	}
	if !slices.Contains(cur, target) {
		return fmt.Sprintf("target %q is not an export of environment %s", target, c.Env)
	}
	return ""
}

// dialReason is a dial error without the addresses it repeats.
func dialReason(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

func refuseStream(st *yamux.Stream, why string) {
	_ = st.SetWriteDeadline(time.Now().Add(tunnel.HeaderTimeout))
	_ = tunnel.WriteLine(st, tunnel.Reply{Error: why})
	st.Close()
}

// watch closes a tunnel whose environment has ended (its streams go with
// it), or whose ticket has expired once it carries nothing.
func (h *TunnelHandler) watch(sess *yamux.Session, c ticket.Claims, log *slog.Logger) {
	t := time.NewTicker(h.cfg.CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-sess.CloseChan():
			return
		case <-t.C:
		}
		if _, ok := h.cfg.Targets(c.Env); !ok {
			log.Info("closing the tunnel: its environment no longer runs here")
			sess.Close()
			return
		}
		if !c.Valid(h.cfg.Clock.Now()) && sess.NumStreams() == 0 {
			sess.Close()
			return
		}
	}
}

func (h *TunnelHandler) track(s *yamux.Session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.sessions[s] = struct{}{}
	return true
}

func (h *TunnelHandler) untrack(s *yamux.Session) {
	h.mu.Lock()
	delete(h.sessions, s)
	h.mu.Unlock()
}

// Close ends every tunnel and refuses new ones; the HTTP server's own
// shutdown does not reach connections upgraded to WebSockets.
func (h *TunnelHandler) Close() {
	h.mu.Lock()
	h.closed = true
	ss := make([]*yamux.Session, 0, len(h.sessions))
	for s := range h.sessions {
		ss = append(ss, s)
	}
	h.mu.Unlock()
	for _, s := range ss {
		s.Close()
	}
}
