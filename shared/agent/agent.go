// Package agent is the reference node agent: it registers a node of a pool
// with the node API, heartbeats (heartbeat.go), claims pending environments
// (claims.go), runs each through the runtime its template names
// (environment.go; the runtimes themselves live in their own packages
// behind the seam of package runtimes: "process", a local process, package
// runtimes/process; "container", an OCI container under runc from the
// template's image, package runtimes/container), and reports ready, stopped
// and failed (report.go). It keeps warm, pre-started environments of
// templates that ask for them (warm.go), and restores snapshots and shares'
// files into an environment's files (package archive), all of an
// environment's archives together held to archive.Limits. While its work
// dir's filesystem is short of space or inodes (Config.MinFreeDisk,
// MinFreeInodes) it claims nothing.
// Run as root on Linux it confines each environment (package confine,
// set up in confinement.go): a user of its own, a folder only that user
// enters, a cgroup where the node allows, a stop that ends every process
// of the environment, and network, PID, mount and IPC namespaces of its
// own, inside which the agent reaches its exports; otherwise it warns at
// start that environments are not confined. Which runtime runs an
// environment is known only to runtimes.go, which wires them by name.
//
// One Agent serves one node credential, so one organization's pool.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/buildcache"
	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// Agent is a running node agent.
type Agent struct {
	cfg  Config
	api  *Client
	http *http.Client
	log  *slog.Logger
	// confinement is how the node holds environments apart, which every
	// runtime is given (confinement.go); noCgroup says why it has no
	// cgroups, noNamespaces why environments do not run in namespaces of
	// their own.
	confinement  *confine.Node
	noCgroup     error
	noNamespaces error
	// boundaries are the environments' network boundaries and network
	// logs (network.go); noBoundary says why the node makes none.
	boundaries netBoundaries
	noBoundary error

	mu   sync.Mutex
	node string
	// org is the node's organization, from its registration, which build
	// caches are kept by.
	org       string
	envs      map[string]*runningEnv
	templates map[string]domain.Template
	// wake is signalled when capacity frees up or templates change.
	wake chan struct{}
	// claiming counts claims in flight, and claimEpoch every claim started,
	// so a heartbeat can tell an environment it does not know yet (its claim
	// answer is on the way) from one whose claim answer was lost.
	claiming   atomic.Int32
	claimEpoch atomic.Int64
	// starting counts claimed environments not yet reported ready (or
	// failed): the warm pool starts no replacement meanwhile, so a crowd's
	// starts do not share the node's CPU with its refill.
	starting atomic.Int32
	// short is whether the node was last found short of disk (noRoom).
	short atomic.Bool

	// sock is the open node protocol connection, nil on HTTP or while
	// reconnecting; reports go on it. reconnects counts reconnections.
	sock       atomic.Pointer[socketClient]
	reconnects atomic.Int64

	// runtimes run environments, by the template runtime they serve
	// (runtimes.go); process is always there.
	runtimes    map[string]runtimes.Runtime
	buildCache  *buildcache.Cache
	noContainer error

	warm *warmPool
	// imageSHAs maps an image artifact's id to its archive's SHA-256, as
	// a claim linked it: a sealed artifact never changes, so warm
	// containers of its templates start from the node's cache (runtimes.go).
	imageSHAs sync.Map
	// tun is the tunnel endpoint; nil with NoTunnel.
	tun *tunnels
	// logs are the environments' logs (logs.go).
	logs envLogs
}

// New checks the configuration and returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.API == "" || cfg.Token == "" || cfg.Address == "" || cfg.WorkDir == "" {
		return nil, errors.New("agent: API, Token, Address and WorkDir are required")
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 8
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 10 * time.Second
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.MaxExecs <= 0 {
		cfg.MaxExecs = DefaultMaxExecs
	}
	cfg.Archives = cfg.Archives.WithDefaults()
	cfg.MinFreeDisk = cfg.MinFreeDisk.or(DefaultMinFreeDisk)
	cfg.MinFreeInodes = cfg.MinFreeInodes.or(DefaultMinFreeInodes)
	if cfg.Statfs == nil {
		cfg.Statfs = statfs
	}
	switch cfg.Transport {
	case "":
		cfg.Transport = TransportAuto
	case TransportAuto, TransportWebSocket, TransportHTTP:
	default:
		return nil, fmt.Errorf("agent: transport %q: one of auto, websocket, http", cfg.Transport)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 16}}
	}
	abs, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	cfg.WorkDir = abs
	if err := os.MkdirAll(filepath.Join(abs, "envs"), 0o755); err != nil {
		return nil, fmt.Errorf("agent: work dir: %w", err)
	}
	a := &Agent{
		cfg: cfg, api: NewClient(cfg.API, cfg.Token, cfg.HTTP, Version), http: cfg.HTTP, log: cfg.Log,
		envs: map[string]*runningEnv{}, templates: map[string]domain.Template{}, wake: make(chan struct{}, 1),
	}
	a.warm = newWarmPool(a)
	if err := a.setupConfinement(); err != nil {
		return nil, err
	}
	if err := a.openBuildCache(); err != nil {
		return nil, fmt.Errorf("agent: build cache: %w", err)
	}
	if err := a.setupRuntimes(); err != nil {
		return nil, err
	}
	return a, nil
}

// Node returns the id of the node the agent registered, once it has.
func (a *Agent) Node() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}

func (a *Agent) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

var errLost = errors.New("the node was declared lost or deregistered")

// ErrCredentialRefused is what Run returns when the control plane refuses
// the node credential (401: revoked, expired or wrong). Retrying with it
// cannot succeed and each try counts against the node's address, so the
// agent stops its environments and ends; it runs again with a new credential.
var ErrCredentialRefused = errors.New("the node credential was refused (revoked, expired or not a node credential); install a new one and start the agent again")

// refused reports whether err is the control plane refusing the credential.
func refused(err error) bool {
	return statusOf(err) == http.StatusUnauthorized || errors.Is(err, ErrCredentialRefused)
}

// Run serves until ctx ends: lock the work dir and clear what an earlier run
// left in it (reclaim), register, then heartbeat, claim and run. If the
// control plane declares the node lost (it missed heartbeats), what it ran
// was failed there: the agent stops it all and registers a new node. When
// ctx ends it stops every process and deregisters.
func (a *Agent) Run(ctx context.Context) error {
	unlock, err := lockWorkDir(a.cfg.WorkDir)
	if err != nil {
		return err
	}
	defer unlock()
	a.logConfinement()
	a.logRuntimes()
	// Connections kept for reuse (and one dialed for a request that was then
	// cancelled) would hold the control plane's graceful shutdown open.
	defer a.http.CloseIdleConnections()
	a.recoverRuntimes(ctx)
	// Boxes made ahead only once what an earlier run left is cleared (it
	// clears every folder under envs/), and removed when the agent ends.
	a.prepared().Fill()
	defer a.prepared().Close()
	if err := a.startTunnels(); err != nil {
		return err
	}
	defer a.stopTunnels()
	// Run may also end on its own (a refused credential): the warm pool is
	// stopped with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	warmDone := make(chan struct{})
	go func() { defer close(warmDone); a.warm.run(ctx) }()
	defer func() { cancel(); <-warmDone }()
	sampleDone := make(chan struct{})
	go func() { defer close(sampleDone); a.sampleLoop(ctx) }()
	defer func() { cancel(); <-sampleDone }()
	for {
		err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if refused(err) {
			a.log.Error("the node credential was refused; environments stopped, the agent ends", "err", err)
			return fmt.Errorf("%w: %v", ErrCredentialRefused, err)
		}
		a.log.Warn("node session ended; registering again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (a *Agent) session(ctx context.Context) error {
	reg, err := a.register(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.node = reg.Node.ID
	a.org = reg.Organization
	a.mu.Unlock()
	a.setTunnelIdentity(reg)
	a.setTemplates(reg.Templates)
	a.log.Info("node registered", "node", reg.Node.ID, "pool", reg.Node.Pool, "address", a.cfg.Address, "capacity", a.cfg.Capacity,
		"platform", reg.Node.Platform, "runtimes", reg.Node.Runtimes)

	sctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	interval := reg.HeartbeatInterval.Std()
	if a.cfg.Heartbeat > 0 {
		interval = a.cfg.Heartbeat
	}
	wait := reg.ClaimWait.Std()
	if a.cfg.ClaimWait > 0 {
		wait = a.cfg.ClaimWait
	}
	var sock *socketClient
	url := a.socketURL(reg)
	if url != "" {
		sock, err = a.openSocket(sctx, url)
		if err != nil {
			a.log.Warn("the node protocol's WebSocket did not open; using HTTP heartbeats and long-poll claims", "url", url, "err", err)
		}
	}
	if sock != nil {
		a.log.Info("node protocol connected", "url", url)
		err = a.socketSession(sctx, reg, url, sock, interval)
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.heartbeats(sctx, reg.Node.ID, interval); err != nil {
				cancel(err)
			}
		}()
		err = a.claims(sctx, reg.Node.ID, wait)
	}
	cancel(err)
	wg.Wait()
	// Every environment goroutine stops its process when sctx ends.
	a.waitEnvs()
	if ctx.Err() != nil {
		// Shutting down: leave the pool, so what is left fails at once
		// rather than after the lost timeout.
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer dcancel()
		if err := a.api.Deregister(dctx, reg.Node.ID); err != nil {
			a.log.Info("deregister", "err", err)
		}
	}
	return context.Cause(sctx)
}

func (a *Agent) register(ctx context.Context) (nodes.Registered, error) {
	backoff := 200 * time.Millisecond
	for {
		reg, err := a.api.Register(ctx, nodes.RegisterRequest{
			Name: a.cfg.Name, Address: a.cfg.Address, Capacity: a.cfg.Capacity, Agent: Version,
			TunnelURL: a.tunnelURL(), Platform: platform(), Runtimes: a.runtimeNames(),
		})
		if err == nil {
			return reg, nil
		}
		if s := statusOf(err); s == http.StatusUnauthorized || s == http.StatusForbidden || s == http.StatusUnprocessableEntity {
			return reg, fmt.Errorf("register: %w", err) // retrying will not help; Run tries again slowly
		}
		a.log.Warn("register failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return reg, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (a *Agent) setTemplates(ts []domain.Template) {
	a.mu.Lock()
	a.templates = map[string]domain.Template{}
	for _, t := range ts {
		a.templates[t.Name] = t
	}
	a.mu.Unlock()
	a.warm.poke()
}

func (a *Agent) templateList() []domain.Template {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]domain.Template, 0, len(a.templates))
	for _, t := range a.templates {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
