package confine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/envlease/envlease/shared/netguard"
	"golang.org/x/net/netutil"
)

// An environment of a template with network "egress", run in a network
// namespace of its own, reaches the outside world only through an HTTP
// proxy the agent serves on the loopback of that namespace: the proxy's
// socket lives in the environment's namespace, its outgoing connections in
// the node's. It forwards CONNECT (HTTPS, or any TCP stream) and plain
// http:// requests, resolves names on the node, and dials only public
// addresses that are not the node's own, judged on the very address being
// dialed (after DNS, so a name rebound to a private address is refused).
// Nothing of the node's network configuration changes: no forwarding, no
// NAT, no interface beyond the namespace's lo.
//
// The proxy is written on net/http and httputil rather than a proxy library:
// what it needs is a guarded dialer, a 403 that names why an address was
// refused whichever way it was asked for (the libraries answer a failed
// CONNECT dial with a bare 502), and a lifetime bound to the environment,
// all of which the standard library gives in a few lines.

// EgressPort is where an egress environment's proxy listens, on 127.0.0.1
// of its network namespace; when an export of the template takes it, the
// next port no export takes.
const EgressPort = 3128

// egressMaxActive bounds the requests and CONNECT streams one environment
// has open through its proxy at once: each holds descriptors of the agent.
const egressMaxActive = 512

// egressMaxConns bounds the connections one environment holds open to its
// proxy, idle or not (each is a descriptor of the agent's, which every
// environment of the node shares); beyond it new connections wait in the
// kernel's backlog until one closes.
const egressMaxConns = 1024

// EgressPortFor is the port the proxy of an environment with these export
// ports listens on.
func EgressPortFor(ports map[string]int) int {
	taken := map[int]bool{}
	for _, p := range ports {
		taken[p] = true
	}
	p := EgressPort
	for taken[p] {
		p++
	}
	return p
}

// EgressEnv is what an egress environment is told of its proxy; the
// template's env, which comes after, may override any of it.
func EgressEnv(port int) []string {
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	env := make([]string, 0, 7)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"} {
		env = append(env, k+"="+u)
	}
	return append(env, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
}

// egressRefusal is why the proxy would not dial an address.
type egressRefusal struct {
	addr   netip.Addr
	reason string
}

func (e *egressRefusal) Error() string {
	return fmt.Sprintf("egress to %s is refused: it is %s", e.addr, e.reason)
}

// EgressGuard judges the addresses an environment's proxy dials.
type EgressGuard struct {
	// allow lets exact addresses through whatever they are: only tests,
	// whose "outside" server listens on the node's loopback, set it.
	allow map[netip.AddrPort]bool
	// nodeAddrs lists the node's own addresses (default: every interface's,
	// read at each dial, so an address added later is refused too).
	nodeAddrs func() []netip.Addr
}

// NewEgressGuard is the guard of a node's egress proxies; allow lets those
// exact addresses through whatever they are (only tests set it: their
// "outside" servers listen on the node's loopback).
func NewEgressGuard(allow []netip.AddrPort) EgressGuard {
	g := EgressGuard{}
	if len(allow) > 0 {
		g.allow = map[netip.AddrPort]bool{}
		for _, ap := range allow {
			g.allow[ap] = true
		}
	}
	return g
}

// control refuses, in the dialer, any address that is not public or is the
// node's own.
func (g EgressGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &egressRefusal{reason: "not an address: " + address}
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
	if g.allow[ap] {
		return nil
	}
	ip := ap.Addr()
	if class := netguard.Class(ip, false); class != "" {
		return &egressRefusal{addr: ip, reason: class}
	}
	own := g.nodeAddrs
	if own == nil {
		own = interfaceAddrs
	}
	for _, a := range own() {
		if a.Unmap().WithZone("") == ip {
			return &egressRefusal{addr: ip, reason: "the node's own address"}
		}
	}
	return nil
}

func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip)
			}
		}
	}
	return out
}

// EgressProxy is one environment's proxy, alive until close.
type EgressProxy struct {
	log    *slog.Logger
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	rp     *httputil.ReverseProxy
	dialer *net.Dialer
	ctx    context.Context
	cancel context.CancelFunc
	served chan struct{}

	mu      sync.Mutex
	closed  bool
	streams map[net.Conn]struct{} // both ends of every CONNECT stream
	active  sync.WaitGroup        // handlers and stream copies
	slots   chan struct{}
	once    sync.Once

	conns, refused, sent, received atomic.Int64
}

// ServeEgress serves the proxy on ln until close.
func ServeEgress(ln net.Listener, g EgressGuard, log *slog.Logger) *EgressProxy {
	ln = netutil.LimitListener(ln, egressMaxConns)
	ctx, cancel := context.WithCancel(context.Background())
	p := &EgressProxy{
		log: log, ln: ln, ctx: ctx, cancel: cancel, served: make(chan struct{}),
		streams: map[net.Conn]struct{}{}, slots: make(chan struct{}, egressMaxActive),
		dialer: &net.Dialer{Timeout: 15 * time.Second, Control: g.control},
	}
	p.tr = &http.Transport{
		Proxy:                 nil, // the node's own proxy settings are not the environment's
		DialContext:           p.dial,
		MaxIdleConns:          64, // across hosts: one environment cannot park descriptors on many
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
	}
	p.rp = &httputil.ReverseProxy{
		// The request is already absolute; Rewrite (rather than Director)
		// also keeps X-Forwarded-For and the like out of it.
		Rewrite:      func(*httputil.ProxyRequest) {},
		Transport:    p.tr,
		ErrorHandler: p.fail,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute, // a client's idle keep-alive holds a descriptor of the agent's
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	return p
}

// dial connects to the outside for the environment, through the guard, and
// counts what goes through the connection.
func (p *EgressProxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.dialer.DialContext(ctx, network, addr)
	if err != nil {
		if errors.As(err, new(*egressRefusal)) {
			p.refused.Add(1)
		}
		return nil, err
	}
	p.conns.Add(1)
	return &countedConn{Conn: c, sent: &p.sent, received: &p.received}, nil
}

func (p *EgressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		http.Error(w, "the environment is stopping", http.StatusServiceUnavailable)
		return
	}
	p.active.Add(1)
	p.mu.Unlock()
	defer p.active.Done()
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		http.Error(w, fmt.Sprintf("too many connections through the egress proxy (at most %d at once)", egressMaxActive), http.StatusServiceUnavailable)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		p.rp.ServeHTTP(w, r)
	default:
		http.Error(w, "this proxy forwards CONNECT host:port and absolute http:// URLs (https goes through CONNECT)", http.StatusBadRequest)
	}
}

// fail answers a request the proxy could not forward: 403 with the reason
// for a refused address, else 502.
func (p *EgressProxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	var refusal *egressRefusal
	if errors.As(err, &refusal) {
		p.log.Debug("egress refused", "to", r.Host, "err", refusal)
		http.Error(w, refusal.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, "egress to "+r.Host+" failed: "+err.Error(), http.StatusBadGateway)
}

// connect opens a stream to host:port and copies both ways until both
// ends are done or the proxy closes.
func (p *EgressProxy) connect(w http.ResponseWriter, r *http.Request) {
	if _, _, err := net.SplitHostPort(r.Host); err != nil {
		http.Error(w, "CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	out, err := p.dial(r.Context(), "tcp", r.Host)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	in, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		out.Close()
		http.Error(w, "CONNECT is not supported on this connection", http.StatusInternalServerError)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	p.streams[in], p.streams[out] = struct{}{}, struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, in)
		delete(p.streams, out)
		p.mu.Unlock()
		in.Close()
		out.Close()
	}()
	_ = in.SetDeadline(time.Time{}) // the server's header timeout no longer applies
	if _, err := io.WriteString(in, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var up sync.WaitGroup
	up.Add(1)
	go func() {
		defer up.Done()
		// What the client sent after its request, already read.
		_, _ = io.Copy(out, io.MultiReader(io.LimitReader(buf.Reader, int64(buf.Reader.Buffered())), in))
		closeWrite(out)
	}()
	_, _ = io.Copy(in, out)
	closeWrite(in)
	up.Wait()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// close stops the proxy: no new connection, every open one ended, every
// goroutine of it returned; then it logs what went through. Safe to call
// more than once.
func (p *EgressProxy) Close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		for c := range p.streams {
			c.Close()
		}
		p.mu.Unlock()
		p.cancel()
		_ = p.srv.Close()
		<-p.served
		p.active.Wait()
		p.tr.CloseIdleConnections()
		p.log.Info("egress totals", "connections", p.conns.Load(), "refused", p.refused.Load(),
			"bytesSent", p.sent.Load(), "bytesReceived", p.received.Load())
	})
}

// countedConn counts the bytes an outgoing connection sends and receives.
type countedConn struct {
	net.Conn
	sent, received *atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.received.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	return n, err
}

func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Check says why the guard refuses ap (as the error the proxy gives), or
// nil: what the network boundary asks before any policy of the
// environment's.
func (g EgressGuard) Check(ap netip.AddrPort) error {
	return g.control("tcp", ap.String(), nil)
}
