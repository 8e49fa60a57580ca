package agent

import (
	"context"
	"encoding/base64"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// tunnels is the agent's tunnel endpoint and the identity its tickets are
// checked against, which changes with each registration.
type tunnels struct {
	h   *TunnelHandler
	srv *http.Server
	url string

	mu sync.Mutex
	id TunnelIdentity
	ok bool
	// opened are the preview links opened since the last heartbeat
	// (preview_endpoint.go).
	opened []nodes.PreviewOpened
}

// startTunnels opens the tunnel endpoint before the node registers, since
// registration tells the API its URL.
func (a *Agent) startTunnels() error {
	if a.cfg.NoTunnel {
		return nil
	}
	addr := a.cfg.TunnelAddr
	if addr == "" {
		addr = net.JoinHostPort(a.cfg.Address, "0")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && a.cfg.TunnelAddr == "" {
		// The address clients reach the node at need not be one of its own
		// (a public IP in front of it): listen on every interface, which the
		// tickets guard as well as one.
		a.log.Info("the tunnel endpoint cannot listen on the node's address; it listens on every interface", "address", a.cfg.Address, "err", err)
		ln, err = net.Listen("tcp", ":0")
	}
	if err != nil {
		return fmt.Errorf("agent: tunnel endpoint: %w (choose another with -tunnel-addr, or -no-tunnel)", err)
	}
	u := a.cfg.TunnelURL
	if u == "" {
		u = "ws://" + net.JoinHostPort(a.cfg.Address, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)) + tunnel.Path
	}
	t := &tunnels{url: u}
	t.h = NewTunnelHandler(TunnelConfig{Identity: t.identity, Targets: a.readyTargets, DialEnv: a.dialCounted(domain.ActivityTunnel), Log: a.log,
		Opens: map[string]OpenFunc{ticket.OpenExec: a.serveExec}})
	t.srv = &http.Server{
		Handler: a.endpoint(t), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: log.New(slogWriter{a.log}, "", 0),
	}
	go func() { _ = t.srv.Serve(ln) }()
	a.tun = t
	a.log.Info("tunnel endpoint", "url", u, "listen", ln.Addr().String())
	return nil
}

func (a *Agent) stopTunnels() {
	if a.tun != nil {
		_ = a.tun.srv.Close()
		a.tun.h.Close()
	}
}

// tunnelURL is the URL registration reports, "" without tunnels.
func (a *Agent) tunnelURL() string {
	if a.tun == nil {
		return ""
	}
	return a.tun.url
}

func (a *Agent) setTunnelIdentity(reg nodes.Registered) {
	if a.tun == nil {
		return
	}
	key, err := base64.RawURLEncoding.DecodeString(reg.TunnelKey)
	a.tun.mu.Lock()
	defer a.tun.mu.Unlock()
	a.tun.id = TunnelIdentity{Org: reg.Organization, Node: reg.Node.ID, Key: key}
	a.tun.ok = err == nil && len(key) > 0 && reg.Organization != ""
	if !a.tun.ok {
		a.log.Warn("the registration carried no usable tunnel key: tunnels are refused", "err", err)
	}
}

func (t *tunnels) identity() (TunnelIdentity, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id, t.ok
}

// readyTargets are the export targets of an environment the agent runs, is
// ready and is not being stopped.
func (a *Agent) readyTargets(env string) ([]string, bool) {
	r := a.env(env)
	if r == nil {
		return nil, false
	}
	select {
	case <-r.stop:
		return nil, false
	default:
	}
	ts := r.targets.Load()
	if ts == nil {
		return nil, false
	}
	return *ts, true
}

// dialTarget connects to an export target of an environment the agent
// runs: inside its network namespace when it has one (the target names the
// node's address, where nothing of the environment listens), else at the
// target itself.
func (a *Agent) dialTarget(ctx context.Context, env, target string) (net.Conn, error) {
	r := a.env(env)
	if r == nil {
		return nil, confine.ErrEnded
	}
	hp := r.h.Load()
	if hp == nil || !(*hp).Namespaced() {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", target)
	}
	_, port, err := net.SplitHostPort(target)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	return (*hp).Dial(ctx, n)
}

func (r *runningEnv) setTargets(exports []nodes.ExportTarget) {
	ts := make([]string, len(exports))
	for i, x := range exports {
		ts[i] = x.Target
	}
	r.targets.Store(&ts)
}

// slogWriter sends the HTTP server's own complaints (a bad request line, a
// failed handshake) to the agent's log.
type slogWriter struct {
	log interface{ Info(string, ...any) }
}

func (w slogWriter) Write(b []byte) (int, error) {
	w.log.Info("tunnel endpoint: " + string(b))
	return len(b), nil
}
