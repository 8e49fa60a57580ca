package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/envlog"
	"github.com/envlease/envlease/shared/agent/netstack"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/netpolicy"
)

// NetLogMax bounds each environment's network log on the node: the last
// 4 MiB of records (some 15,000 connections) are kept.
const NetLogMax = 4 << 20

// netBoundaries are the network boundaries of the environments the agent
// runs (docs/nodes.md, "Network boundary"), by the id the runtime gave
// them, each with its network log: a ring file under <WorkDir>/netlogs of
// JSON lines, one per record.
type netBoundaries struct {
	mu   sync.Mutex
	byID map[string]*netEnv
	logs map[string]*envlog.Log // kept after the boundary closed, until read
}

type netEnv struct {
	b   *netstack.Boundary
	log *envlog.Log
	// template is the template's layer of the policy, which stays; own
	// the environment's layer last applied (nil: none), under
	// netBoundaries.mu.
	template *netpolicy.Policy
	own      *domain.EnvNetwork
	refused  *refusalBatch
	// secrets holds the values of the secrets its template binds, once
	// fetched (a warm environment's from the lease that adopts it).
	secrets *envSecrets
}

func (a *Agent) netLogsDir() string { return filepath.Join(a.cfg.WorkDir, "netlogs") }

// setupBoundaries gives the node network boundaries where it can make
// them (TUN devices), and says why not otherwise.
func (a *Agent) setupBoundaries(n *confine.Node) {
	if a.noBoundary = netstack.Probe(); a.noBoundary != nil {
		return
	}
	// What an earlier run of the agent left is of environments that ended
	// with it.
	_ = os.RemoveAll(a.netLogsDir())
	a.boundaries.byID = map[string]*netEnv{}
	a.boundaries.logs = map[string]*envlog.Log{}
	n.Boundary = a.openBoundary
}

// logBoundaries says at start which way templates with network open or
// rules reach out.
func (a *Agent) logBoundaries() {
	if a.noBoundary == nil {
		a.log.Info("templates with network open or rules reach out through a network boundary: a TUN device in the environment's namespace whose other end is the agent's own TCP/IP stack, which answers its DNS, decides every connection by the environment's rules (never the node's addresses or private ranges) and logs it")
		return
	}
	a.log.Warn("this node makes no network boundaries: templates with network open reach public addresses through the agent's HTTP proxy instead (programs must honour HTTP_PROXY; nothing else gets out, and connections are not logged one by one), and templates with network rules cannot start here", "err", a.noBoundary.Error())
}

// openBoundary is confine.Node.Boundary: the boundary of environment id,
// with its network log.
func (a *Agent) openBoundary(h netns.NsHandle, t domain.Template, id string) (confine.Egress, error) {
	p, err := t.NetworkPolicy()
	if err != nil {
		return nil, err
	}
	layers := netpolicy.Layers{p}
	// The environment's own layer, from its claim (a warm environment has
	// none until a lease adopts it).
	a.mu.Lock()
	r := a.envs[id]
	a.mu.Unlock()
	if r != nil && r.env.Network != nil {
		own, err := r.env.Network.Policy()
		if err != nil {
			return nil, err
		}
		layers = append(layers, own)
	}
	if err := os.MkdirAll(a.netLogsDir(), 0o700); err != nil {
		return nil, err
	}
	l, err := envlog.Create(filepath.Join(a.netLogsDir(), id+".jsonl"), NetLogMax, time.Now)
	if err != nil {
		return nil, err
	}
	refused := &refusalBatch{a: a, id: id}
	holder := &envSecrets{}
	if r != nil {
		holder = &r.secrets
	}
	b, err := netstack.Open(h, netstack.Config{
		Secrets:  boundarySecrets(t, holder, a.cfg.boundaryRoots),
		Policy:   layers,
		Guard:    a.confinement.Guard.Check,
		Resolver: a.cfg.boundaryResolver,
		Dial:     a.cfg.boundaryDial,
		Log:      netRecorder{l: l, refused: refused},
		Slog:     a.log.With("environment", id),
	})
	if err != nil {
		l.Remove()
		return nil, err
	}
	a.boundaries.mu.Lock()
	var own *domain.EnvNetwork
	if r != nil {
		own = r.env.Network
	}
	ne := &netEnv{b: b, log: l, template: p, own: own, refused: refused, secrets: holder}
	a.boundaries.byID[id] = ne
	a.boundaries.logs[id] = l
	a.boundaries.mu.Unlock()
	return &boundaryHandle{a: a, b: b, log: l, refused: refused, e: ne}, nil
}

// boundaryHandle closes a boundary with its environment; the network log
// stays readable until the environment's end is reported.
type boundaryHandle struct {
	a       *Agent
	e       *netEnv
	b       *netstack.Boundary
	log     *envlog.Log
	refused *refusalBatch
	once    sync.Once
}

// CACert is the PEM certificate of the environment's CA, which the runtime
// makes the environment trust (nil when its template binds no secret).
func (h *boundaryHandle) CACert() []byte { return h.b.CACert() }

func (h *boundaryHandle) Close() {
	h.once.Do(func() {
		h.b.Close()
		h.refused.close()
		h.log.Close()
		// Found by what it is, not by name: a warm environment's is
		// renamed when a lease adopts it (adoptWarmBoundary).
		bs := &h.a.boundaries
		bs.mu.Lock()
		for id, e := range bs.byID {
			if e == h.e {
				delete(bs.byID, id)
				if strings.HasPrefix(id, "warm-") {
					// It served no lease: nobody keeps its log.
					delete(bs.logs, id)
					defer h.log.Remove()
				}
			}
		}
		bs.mu.Unlock()
	})
}

// adoptWarmBoundary renames the boundary and network log of the warm
// environment h to the environment r that a lease hands it to, and applies
// r's own layer of its policy.
func (a *Agent) adoptWarmBoundary(h runtimes.Handle, r *runningEnv) {
	a.logs.mu.Lock()
	warm, ok := a.logs.warm[h]
	a.logs.mu.Unlock()
	if !ok {
		return
	}
	bs := &a.boundaries
	bs.mu.Lock()
	e := bs.byID[warm]
	if e != nil {
		delete(bs.byID, warm)
		bs.byID[r.id] = e
	}
	if l := bs.logs[warm]; l != nil {
		delete(bs.logs, warm)
		bs.logs[r.id] = l
	}
	bs.mu.Unlock()
	if e == nil {
		return
	}
	e.refused.rename(r.id)
	r.secrets.mu.Lock()
	e.secrets.set(r.secrets.vals)
	r.secrets.mu.Unlock()
	if r.env.Network != nil {
		a.networkPushed(r.id, r.env.Network)
	}
}

// netLog is the network log of environment id, while the node holds it.
func (a *Agent) netLog(id string) (*envlog.Log, bool) {
	a.boundaries.mu.Lock()
	defer a.boundaries.mu.Unlock()
	l, ok := a.boundaries.logs[id]
	return l, ok
}

// keepNetLog uploads environment id's network log, once it ended, as an
// artifact the environment links to (networkLog), and removes it from the
// node, as keepLog does for its log; failing to keep it is logged.
func (a *Agent) keepNetLog(ctx context.Context, node, id string) {
	a.boundaries.mu.Lock()
	l := a.boundaries.logs[id]
	delete(a.boundaries.logs, id)
	a.boundaries.mu.Unlock()
	a.keepRing(ctx, node, id, l, "network")
}

// networkPushed applies an environment's new own layer (pushed by the
// service) to its boundary: new connections are decided by it at once, and
// the open ones it refuses are closed.
func (a *Agent) networkPushed(id string, n *domain.EnvNetwork) {
	a.boundaries.mu.Lock()
	e := a.boundaries.byID[id]
	if e != nil {
		e.own = n
	}
	a.boundaries.mu.Unlock()
	if e == nil {
		a.log.Info("network rules for an environment without a boundary here", "environment", id)
		return
	}
	layers := netpolicy.Layers{e.template}
	if n != nil {
		own, err := n.Policy()
		if err != nil {
			a.log.Warn("network rules refused", "environment", id, "err", err)
			return
		}
		layers = append(layers, own)
	}
	e.b.SetPolicy(layers)
	a.log.Info("network rules changed", "environment", id)
}

// networkBeat applies the layer a heartbeat's answer says the environment
// has, when it differs from the one applied last: a push that was lost, or
// a node on the HTTP fallback, catches up within a beat.
func (a *Agent) networkBeat(id string, n *domain.EnvNetwork) {
	a.boundaries.mu.Lock()
	e := a.boundaries.byID[id]
	same := e == nil || e.own != nil && e.own.Version == n.Version && slices.Equal(e.own.Allow, n.Allow) && slices.Equal(e.own.Deny, n.Deny)
	a.boundaries.mu.Unlock()
	if !same {
		a.networkPushed(id, n)
	}
}

// netVersions are the versions of the own network layers applied to the
// boundaries of the environments this node runs (0: the lease's, or none),
// which heartbeats report so a lost push is sent again.
func (a *Agent) netVersions() map[string]int64 {
	a.boundaries.mu.Lock()
	all := make(map[string]int64, len(a.boundaries.byID))
	for id, e := range a.boundaries.byID {
		var v int64
		if e.own != nil {
			v = e.own.Version
		}
		all[id] = v
	}
	a.boundaries.mu.Unlock()
	var out map[string]int64
	for id, v := range all {
		if a.env(id) == nil {
			continue // a warm environment's: no lease has its own layer yet
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[id] = v
	}
	return out
}

// netRecorder writes records to a network log, one JSON line each, and
// passes refusals on to become events.
type netRecorder struct {
	l       *envlog.Log
	refused *refusalBatch
}

func (r netRecorder) Record(x netstack.Record) {
	if x.Verdict == netstack.VerdictDeny && r.refused != nil {
		r.refused.add(x)
	}
	b, err := json.Marshal(x)
	if err != nil {
		return
	}
	_, _ = r.l.Write(append(b, '\n'))
}
