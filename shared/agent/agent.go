// Package agent is the reference node agent: it registers a node of a pool
// with the node API, heartbeats, claims pending environments, runs each
// through the runtime its template names (package runtimes: "process", a
// local process, process_runtime.go; "container", an OCI container under
// runc from the template's image, container_runtime_linux.go), and reports
// ready, stopped and failed. It keeps warm, pre-started environments of
// templates that ask for them, and restores snapshots and shares' files
// into an environment's files (UnpackTarRoot), all of an environment's
// archives together held to ArchiveLimits. While its work dir's filesystem is short of space or
// inodes (Config.MinFreeDisk, MinFreeInodes) it claims nothing.
// Run as root on Linux it confines each environment: a user of its own, a
// folder only that user enters, a cgroup where the node allows, a stop
// that ends every process of the environment (confine.go), and network,
// PID, mount and IPC namespaces of its own under an init (nsinit,
// netns_linux.go), inside which the agent reaches its exports; otherwise it
// warns at start that environments are not confined.
//
// One Agent serves one node credential, so one organization's pool.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// Version is what the agent calls itself when it registers.
const Version = "envlease-agent/1"

// Config configures an agent.
type Config struct {
	// API is the service's base URL; Token a node credential of the pool.
	API, Token string
	// Address is the host clients reach this node's environments at; the
	// export targets are Address:port. In namespaces of their own (as
	// root) nothing of an environment listens there: a target names an
	// export, which the agent's tunnel reaches inside the environment's
	// network namespace.
	Address string
	// WorkDir holds a folder per environment (envs/<id>) and per warm process.
	WorkDir string
	// Name is the node's name (default: the host name); Capacity how many
	// environments it runs at once (default 8). Warm processes are not counted.
	Name     string
	Capacity int
	// Grace is how long a stopped process has between SIGTERM and SIGKILL
	// (default 10s).
	Grace time.Duration
	// ReadyTimeout bounds the wait for every export to accept connections
	// (default 2m).
	ReadyTimeout time.Duration
	// Heartbeat overrides the interval the server asks for, when set.
	Heartbeat time.Duration
	// ClaimWait is how long one claim long-polls (default: the server's).
	ClaimWait time.Duration
	// Transport is how the node speaks to the service after registering:
	// TransportAuto (default: the node protocol's WebSocket when the
	// service names one and it opens, else HTTP), TransportWebSocket or
	// TransportHTTP. SocketURL overrides the WebSocket's URL the
	// registration gives.
	Transport, SocketURL string
	// NoWarm turns warm environments off.
	NoWarm bool
	// Runc is the runc binary the container runtime drives (default: runc
	// on PATH); RuntimeNone ("none") offers no container runtime. Without
	// runc, or when the agent is not root with namespaces, the node offers
	// process alone.
	Runc string
	// ImageCacheDir holds the unpacked images (default <WorkDir>/images),
	// ImageCacheBytes bounds them (default image.DefaultCacheBytes), least
	// recently used evicted first.
	ImageCacheDir   string
	ImageCacheBytes int64
	// RegistryCredentials is a Docker-style config file of registry
	// credentials for pulling images; never taken from a template.
	RegistryCredentials string
	// ContainerIDBase is the first id of the node a container's user
	// namespace maps its 65536 ids to (default DefaultContainerIDBase);
	// ContainerNoUserNS runs containers without a user namespace (root in
	// the container is then the node's root, less capabilities).
	ContainerIDBase   uint32
	ContainerNoUserNS bool
	// AllowSharedNetwork lets an agent that runs as root start although the
	// node cannot make namespaces (a container without the privilege, a
	// systemd unit with RestrictNamespaces): its environments then share the
	// node's network and process list. Without it such an agent refuses to
	// start, rather than run every tenant's environment unconfined with
	// only a warning.
	AllowSharedNetwork bool
	// KeepRoots leaves an environment's folder after it ends, for debugging.
	KeepRoots bool
	// TunnelAddr is where the tunnel endpoint listens (default: an
	// ephemeral port of Address); TunnelURL is the URL clients are told to
	// dial (default ws://Address:<that port>/tunnel), for a node behind a
	// proxy or NAT; NoTunnel serves no tunnels (tickets are then refused by
	// the API).
	TunnelAddr, TunnelURL string
	NoTunnel              bool
	// UIDs is the range of user ids environments run as when the agent runs
	// as root (default DefaultUIDRange). Every agent of the node may share
	// one range; nothing else may use it.
	UIDs UIDRange
	// Archives bounds what each environment's archives, its snapshot and
	// its shares' together, may unpack to (zero fields take the defaults).
	Archives ArchiveLimits
	// MinFreeDisk and MinFreeInodes are the floors of free space and free
	// inodes in the work dir's filesystem below which the agent claims no
	// environment, fails one it claimed, and stops an unpacking (defaults
	// DefaultMinFreeDisk and DefaultMinFreeInodes).
	MinFreeDisk, MinFreeInodes Threshold
	// Statfs reads the work dir's filesystem (default: statfs(2) on Linux;
	// elsewhere nothing, and the floors are not judged). Tests replace it to
	// simulate a full disk.
	Statfs Statfs
	HTTP   *http.Client
	Log    *slog.Logger

	// assumeNotRoot, noCgroups and noNamespaces let tests take the paths of
	// a node where the agent is not root, has no cgroup tree to write, or
	// cannot make namespaces.
	assumeNotRoot, noCgroups, noNamespaces bool
	// egressAllow lets egress proxies reach these addresses whatever they
	// are: tests' "outside" servers, which listen on the node's loopback.
	egressAllow []netip.AddrPort
}

// Agent is a running node agent.
type Agent struct {
	cfg   Config
	api   *Client
	http  *http.Client
	log   *slog.Logger
	ports portPool
	cpu   atomic.Int64
	// users lends each environment a user of its own; nil when the agent is
	// not root. cgroups is the folder environments' cgroups are made in, ""
	// when the node has none the agent may write (noCgroup says why).
	users    *uidPool
	cgroups  string
	noCgroup error
	// namespaces says environments run in network, PID and mount
	// namespaces of their own (root only); noNamespaces says why not.
	namespaces   bool
	noNamespaces error

	mu        sync.Mutex
	node      string
	envs      map[string]*runningEnv
	templates map[string]domain.Template
	// wake is signalled when capacity frees up or templates change.
	wake chan struct{}
	// claiming counts claims in flight, and claimEpoch every claim started,
	// so a heartbeat can tell an environment it does not know yet (its claim
	// answer is on the way) from one whose claim answer was lost.
	claiming   atomic.Int32
	claimEpoch atomic.Int64
	// short is whether the node was last found short of disk (noRoom).
	short atomic.Bool

	// sock is the open node protocol connection, nil on HTTP or while
	// reconnecting; reports go on it. reconnects counts reconnections.
	sock       atomic.Pointer[socketClient]
	reconnects atomic.Int64

	// runtimes run environments, by the template runtime they serve
	// (runtimes.go); process is always there.
	runtimes    map[string]runtimes.Runtime
	noContainer error

	warm *warmPool
	// tun is the tunnel endpoint; nil with NoTunnel.
	tun *tunnels
}

// runningEnv is one environment the agent runs.
type runningEnv struct {
	id  string
	env domain.Environment
	// h is what runs it, set once prepared; tunnels dial through it.
	h atomic.Pointer[runtimes.Handle]
	// stop is closed when the control plane says the environment is over;
	// report says whether to report stopped (stopping) or not (already over).
	stopOnce sync.Once
	stop     chan struct{}
	report   atomic.Bool
	// targets are the export targets once ready, which tunnels may reach.
	targets atomic.Pointer[[]string]
	// checkpoints are the ids of the checkpoints ordered (checkpoint.go).
	checkpoints sync.Map
}

func (r *runningEnv) requestStop(report bool) {
	r.stopOnce.Do(func() {
		r.report.Store(report)
		close(r.stop)
	})
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
	cfg.Archives = cfg.Archives.withDefaults()
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
	if err := a.setupRuntimes(); err != nil {
		return nil, err
	}
	return a, nil
}

// setupConfinement decides how environments are held apart on this node:
// as root, users of their own (from cfg.UIDs) reaching their folders
// through envs/; wherever the agent may write a cgroup v2 tree, a cgroup
// each (docs/nodes.md, "Confinement", says what that covers).
func (a *Agent) setupConfinement() error {
	if a.cfg.UIDs == (UIDRange{}) {
		a.cfg.UIDs = DefaultUIDRange
	}
	if err := a.cfg.UIDs.check(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if canConfine() && !a.cfg.assumeNotRoot {
		users, err := newUIDPool(a.cfg.UIDs)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		a.users = users
		if err := a.searchableByOthers(); err != nil {
			return err
		}
		// A port below this one would be given to a process that cannot
		// bind it; the export gets another free port instead.
		a.ports.lowest = unprivilegedPortStart()
		if a.cfg.noNamespaces {
			a.noNamespaces = errors.New("turned off")
		} else {
			a.noNamespaces = probeNamespaces()
		}
		if a.noNamespaces == nil {
			a.namespaces = true
		} else if !a.cfg.AllowSharedNetwork {
			return fmt.Errorf("agent: environments cannot run in namespaces of their own on this node (%v), so each would reach the node's addresses, its loopback and the other environments, and see every process; give the agent the privilege to make namespaces, or accept that with -allow-shared-network (Config.AllowSharedNetwork)", a.noNamespaces)
		}
	} else {
		a.noNamespaces = errors.New("the agent does not run as root")
	}
	if a.cfg.noCgroups {
		a.noCgroup = fmt.Errorf("%w: turned off", errNoCgroup)
	} else {
		a.cgroups, a.noCgroup = cgroupParent()
	}
	return nil
}

// logConfinement says at start how environments are held apart, and when
// the agent is not root, in one warning, what is then not confined.
func (a *Agent) logConfinement() {
	if a.users != nil {
		stop := "cgroup.kill of its cgroup under " + a.cgroups + ", then every process of its user"
		if a.cgroups == "" {
			stop = "every process of its user, found in /proc (" + a.noCgroup.Error() + ")"
		}
		a.log.Info("environments are confined: each runs as a user of its own, in a folder only that user can enter, with only its own environment variables",
			"uids", a.cfg.UIDs.String(), "stop", stop)
		if a.namespaces {
			a.log.Info("environments run in namespaces of their own: a network namespace with only lo (no route to the node's addresses, its loopback, other environments or the outside), a PID namespace with its own /proc (it sees only its own processes), a mount namespace (with a /dev/shm of its own) and an IPC namespace; the agent reaches exports inside it; a template with network egress reaches public addresses through the agent's HTTP proxy at 127.0.0.1:" + strconv.Itoa(EgressPort) + " of its namespace")
		} else {
			a.log.Warn("environments share the node's network and process list: each can connect to whatever listens on the node's addresses and loopback (the agent's endpoints, other environments' exports, the cloud's metadata address) and see every process on the node, whatever its template's network says (" + a.noNamespaces.Error() + ")")
		}
		return
	}
	stop := "a stop ends the environment's cgroup (cgroup.kill), but a process may move itself out of it, as the cgroup tree is its user's too"
	if a.cgroups == "" {
		stop = "a child that leaves its process group (setsid, a daemon) survives a stop (" + a.noCgroup.Error() + ")"
	}
	a.log.Warn("environments are not confined: the agent does not run as root, so every environment runs as the agent's user (uid " + strconv.Itoa(os.Geteuid()) +
		") and can read the agent's files (its credential file among them) and the other environments' folders and logs, signal the other environments and the agent, run as many processes as the user may (resources.pids counts the user's), connect to whatever listens on the node's addresses and loopback (the agent's endpoints, other environments' exports, the cloud's metadata address) and the outside, whatever its template's network says, and see every process on the node; " + stop)
}

// egressGuard judges what egress proxies dial.
func (a *Agent) egressGuard() egressGuard {
	g := egressGuard{}
	if len(a.cfg.egressAllow) > 0 {
		g.allow = map[netip.AddrPort]bool{}
		for _, ap := range a.cfg.egressAllow {
			g.allow[ap] = true
		}
	}
	return g
}

// Node returns the id of the node the agent registered, once it has.
func (a *Agent) Node() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}

func (a *Agent) cpuTurn() int { return int(a.cpu.Add(1) - 1) }

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

// heartbeats heartbeats every interval and acts on the answer; it returns
// errLost when the control plane no longer knows the node as active.
func (a *Agent) heartbeats(ctx context.Context, node string, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		epoch := a.claimEpoch.Load()
		inFlight := a.claiming.Load() > 0
		ids := a.ids()
		beat, err := a.api.Heartbeat(ctx, node, ids)
		if statusOf(err) == http.StatusGone || statusOf(err) == http.StatusNotFound {
			return errLost
		}
		if refused(err) {
			return err
		}
		if err != nil {
			a.log.Warn("heartbeat failed", "err", err)
			continue
		}
		// Whether a claim overlapped this heartbeat: then an environment the
		// answer assigns to the node may be one the claim is returning.
		claimRaced := inFlight || a.claiming.Load() > 0 || a.claimEpoch.Load() != epoch
		a.apply(ctx, node, ids, beat, claimRaced)
	}
}

func (a *Agent) apply(ctx context.Context, node string, sent []string, beat nodes.Beat, claimRaced bool) {
	a.setTemplates(beat.Templates)
	a.applyStates(ctx, node, sent, beat.Environments, claimRaced)
}

// applyStates acts on what a heartbeat's answer says of the environments:
// stop what is stopping or over, and what was named but is not the node's.
func (a *Agent) applyStates(ctx context.Context, node string, sent []string, states []nodes.EnvState, claimRaced bool) {
	known := map[string]bool{}
	for _, st := range states {
		known[st.ID] = true
		r := a.env(st.ID)
		if r != nil && st.State == domain.StateReady && st.Checkpoint != nil {
			a.checkpointOrdered(ctx, node, st.ID, st.Checkpoint)
		}
		switch {
		case r != nil && st.State == domain.StateStopping:
			r.requestStop(true)
		case r != nil && (st.State == domain.StateStopped || st.State == domain.StateFailed):
			r.requestStop(false)
		case r == nil && (st.State == domain.StateStarting || st.State == domain.StateReady) && !claimRaced:
			// Assigned here, but the claim's answer never arrived: nothing
			// runs it. Say so, so the quota is not held by nothing.
			a.report(ctx, node, st.ID, nodes.Report{State: domain.StateFailed, Error: "the node does not run this environment (the answer to its claim was lost)"})
		case r == nil && st.State == domain.StateStopping:
			a.report(ctx, node, st.ID, nodes.Report{State: domain.StateStopped})
		}
	}
	for _, id := range sent {
		if !known[id] {
			if r := a.env(id); r != nil {
				r.requestStop(false)
			}
		}
	}
}

func (a *Agent) ids() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.envs))
	for id := range a.envs {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (a *Agent) env(id string) *runningEnv {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.envs[id]
}

func (a *Agent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.envs)
}

// claims claims and starts environments while there is capacity.
func (a *Agent) claims(ctx context.Context, node string, wait time.Duration) error {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		if a.count() >= a.cfg.Capacity {
			select {
			case <-ctx.Done():
			case <-a.wake:
			case <-time.After(time.Second):
			}
			continue
		}
		if a.noRoom() != nil {
			// Short of disk: claim nothing, so a node with room takes the
			// work; look again a little later.
			select {
			case <-ctx.Done():
			case <-time.After(roomRecheck):
			}
			continue
		}
		a.claiming.Add(1)
		a.claimEpoch.Add(1)
		c, err := a.api.Claim(ctx, node, wait)
		if err == nil && c != nil {
			a.start(ctx, node, c) // registered before claiming ends, for the heartbeat
		}
		a.claiming.Add(-1)
		switch s := statusOf(err); {
		case err == nil:
			backoff = 200 * time.Millisecond
		case ctx.Err() != nil:
			return nil
		case s == http.StatusGone || s == http.StatusNotFound:
			return errLost
		case refused(err):
			return err
		default:
			if s != http.StatusConflict {
				a.log.Warn("claim failed", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
		}
	}
	return nil
}

// waitEnvs waits until every environment goroutine has stopped its process.
func (a *Agent) waitEnvs() {
	for {
		if a.count() == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start records a claimed environment and runs it in its own goroutine.
func (a *Agent) start(ctx context.Context, node string, c *nodes.Claimed) {
	r := &runningEnv{id: c.Environment.ID, env: c.Environment, stop: make(chan struct{})}
	a.mu.Lock()
	a.envs[r.id] = r
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			delete(a.envs, r.id)
			a.mu.Unlock()
			a.signal()
		}()
		a.runEnv(ctx, node, r, c)
	}()
}

// runEnv takes one environment from claimed to over, through the runtime
// its template names (runtimes.Runtime): prepare, files in, start, ready,
// then wait for its end or a stop.
func (a *Agent) runEnv(ctx context.Context, node string, r *runningEnv, c *nodes.Claimed) {
	log := a.log.With("environment", r.id, "template", c.Template.Name)
	// No starting report: the claim made it starting, and a report would only
	// put a round trip before a warm environment is handed over.

	// Claimed while the node is short of disk (the disk filled during the
	// claim, or no other node took it: socketClaims): refused, with why.
	if err := a.noRoom(); err != nil {
		a.fail(ctx, node, r.id, fmt.Errorf("the node refused the environment: %w", err), log)
		return
	}
	rt, err := a.runtimeFor(c.Template)
	if err != nil {
		a.fail(ctx, node, r.id, err, log)
		return
	}

	var (
		h        runtimes.Handle
		restored *domain.Restored
	)
	// A warm environment started before its files could arrive.
	if c.Snapshot == nil && len(c.Shares) == 0 {
		h = a.warm.take(c.Template)
	}
	if h != nil {
		log.Info("handed a warm environment", append([]any{"runtime", rt.Name()}, h.LogAttrs()...)...)
	} else {
		h, restored, err = a.prepare(ctx, rt, r.id, c)
		if err != nil {
			a.fail(ctx, node, r.id, err, log)
			return
		}
		log.Info("started", append([]any{"runtime", rt.Name()}, h.LogAttrs()...)...)
	}
	defer func() { h.Remove() }() // h may be replaced below
	r.h.Store(&h)

	err = a.waitReady(ctx, h, r.stop)
	if pr, ok := h.(portRacer); err != nil && c.Snapshot == nil && ok && pr.lostPortRace() {
		// A template's port was free when it was chosen and someone else
		// bound it before the command did: start once more, afresh, on
		// ports of the node's choosing rather than fail the lease for a
		// race it lost.
		log.Info("a template port was taken before the command bound it; starting again on other ports", "err", err)
		id := filepath.Base(h.Files().Root)
		h.Remove()
		h2, perr := rt.Prepare(ctx, runtimes.Env{ID: id, Template: withAnyPorts(c.Template)})
		if perr == nil {
			if perr = h2.Start(ctx); perr != nil {
				h2.Remove()
			}
		}
		if perr != nil {
			a.fail(ctx, node, r.id, perr, log)
			return
		}
		h = h2
		r.h.Store(&h)
		err = a.waitReady(ctx, h, r.stop)
	}
	switch {
	case err == nil:
	case errors.Is(err, errStopped):
		a.finish(ctx, node, r, h, log)
		return
	case ctx.Err() != nil:
		h.Stop(a.cfg.Grace)
		return
	default:
		h.Stop(a.cfg.Grace)
		a.fail(ctx, node, r.id, err, log)
		return
	}
	ports := h.Ports()
	exports := make([]nodes.ExportTarget, 0, len(ports))
	for s, port := range ports {
		exports = append(exports, nodes.ExportTarget{Service: s, Target: net.JoinHostPort(a.cfg.Address, strconv.Itoa(port))})
	}
	sort.Slice(exports, func(i, j int) bool { return exports[i].Service < exports[j].Service })
	r.setTargets(exports) // before the API says ready, so a ticket never comes first
	if err := a.reportErr(ctx, node, r.id, nodes.Report{State: domain.StateReady, Exports: exports, Restored: restored}); err != nil {
		// 409: it was deleted or timed out while starting; anything else
		// (the API unreachable after retries): the heartbeat decides.
		if statusOf(err) == http.StatusConflict {
			r.requestStop(true)
		}
		log.Info("ready not recorded", "err", err)
	} else {
		log.Info("ready", "exports", exports)
	}

	select {
	case <-h.Done():
		select {
		case <-r.stop: // it was being stopped anyway
			a.finish(ctx, node, r, h, log)
		default:
			a.fail(ctx, node, r.id, h.Err(), log)
		}
	case <-r.stop:
		a.finish(ctx, node, r, h, log)
	case <-ctx.Done():
		// The agent is shutting down (or the node was lost): stop the
		// environment; the control plane learns through deregistration or
		// the lost-node sweep.
		h.Stop(a.cfg.Grace)
	}
}

// prepare readies a claimed environment that no warm one serves: the
// runtime prepares it (downloading an image artifact through the agent if
// it must), the agent restores the snapshot and unpacks the shares into its files within one archive
// budget, and the runtime starts it. On failure nothing of it is left.
func (a *Agent) prepare(ctx context.Context, rt runtimes.Runtime, id string, c *nodes.Claimed) (runtimes.Handle, *domain.Restored, error) {
	h, err := rt.Prepare(ctx, runtimes.Env{ID: id, Template: c.Template, ImageArtifact: a.imageArtifact(c)})
	if err != nil {
		return nil, nil, err
	}
	var restored *domain.Restored
	files := h.Files()
	budget := a.budget()
	if c.Snapshot != nil {
		restored, err = a.restore(ctx, c.Snapshot, files, budget)
	}
	if err == nil {
		err = a.unpackShares(ctx, c.Shares, files, budget)
	}
	if err == nil {
		err = h.Start(ctx)
	}
	if err != nil {
		h.Remove()
		return nil, nil, err
	}
	return h, restored, nil
}

// runtimeFor is the runtime of the node that runs t, or why none does.
func (a *Agent) runtimeFor(t domain.Template) (runtimes.Runtime, error) {
	name := t.Runtime
	if name == "" {
		name = RuntimeProcess
	}
	if rt, ok := a.runtimes[name]; ok {
		return rt, nil
	}
	return nil, fmt.Errorf("runtime %q is not supported by this node: it offers %s", name, a.runtimeText())
}

// finish stops an environment the control plane ended: SIGTERM, grace,
// SIGKILL, then report stopped if it was stopping.
func (a *Agent) finish(ctx context.Context, node string, r *runningEnv, h runtimes.Handle, log *slog.Logger) {
	h.Stop(a.cfg.Grace)
	log.Info("stopped")
	// Remove what it left before saying stopped: whoever reads `stopped`
	// may rely on nothing of the environment being left on the node.
	h.Remove()
	if r.report.Load() {
		a.report(ctx, node, r.id, nodes.Report{State: domain.StateStopped})
	}
}

func (a *Agent) fail(ctx context.Context, node, id string, err error, log *slog.Logger) {
	log.Warn("failed", "err", err)
	a.report(ctx, node, id, nodes.Report{State: domain.StateFailed, Error: err.Error()})
}

// report sends a report, retrying network and server errors a few times:
// repeating a report is harmless. A refusal (4xx) is logged, not retried.
func (a *Agent) report(ctx context.Context, node, id string, r nodes.Report) {
	if err := a.reportErr(ctx, node, id, r); err != nil {
		a.log.Info("report not recorded", "environment", id, "state", r.State, "err", err)
	}
}

func (a *Agent) reportErr(ctx context.Context, node, id string, r nodes.Report) error {
	backoff := 100 * time.Millisecond
	var err error
	for try := 0; try < 6; try++ {
		if err = a.send(ctx, node, id, r); err == nil {
			return nil
		}
		if s := statusOf(err); s >= 400 && s < 500 || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return err
}

// send sends a report on the node protocol's connection when one is open,
// and over HTTP otherwise or when the connection fails to answer.
func (a *Agent) send(ctx context.Context, node, id string, r nodes.Report) error {
	if sock := a.sock.Load(); sock != nil {
		_, err := sock.call(ctx, nodes.Message{Type: nodes.MsgReport, Node: node, Environment: id, Report: &r})
		if !errors.Is(err, errNoAnswer) {
			return err
		}
	}
	return a.api.Report(ctx, node, id, r)
}

// openSocket opens the node protocol's WebSocket: once with
// TransportAuto (a failure means HTTP for this session), until it opens
// with TransportWebSocket.
func (a *Agent) openSocket(ctx context.Context, url string) (*socketClient, error) {
	backoff := reconnectFirst
	for {
		sock, err := a.dialSocket(ctx, url)
		if err == nil || a.cfg.Transport != TransportWebSocket || ctx.Err() != nil {
			return sock, err
		}
		a.log.Warn("the node protocol's WebSocket did not open; retrying", "url", url, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(jittered(backoff)):
		}
		backoff = min(backoff*2, reconnectMax)
	}
}

// Transport says how the agent speaks to the service now: "websocket"
// while its node protocol connection is open, else "http".
func (a *Agent) Transport() string {
	if a.sock.Load() != nil {
		return TransportWebSocket
	}
	return TransportHTTP
}

// Reconnects counts how often the node protocol's connection was opened
// again after it dropped.
func (a *Agent) Reconnects() int64 { return a.reconnects.Load() }
