package domain

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Node states. A node is active from registration until it deregisters
// (left) or stops heartbeating for longer than the lost timeout (lost).
const (
	NodeActive = "active"
	NodeLost   = "lost"
	NodeLeft   = "left"
)

// Node is a machine of a pool that runs environments through an agent.
type Node struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Pool    string `json:"pool"`
	Address string `json:"address"`
	// Capacity is how many environments the node runs at once.
	Capacity int    `json:"capacity"`
	State    string `json:"state"`
	// Agent is the agent's self-description ("envlease-agent/1", say).
	Agent         string    `json:"agent"`
	Registered    time.Time `json:"registered"`
	LastHeartbeat time.Time `json:"lastHeartbeat"`
	// Deadline is when the node is lost unless it heartbeats first.
	Deadline time.Time  `json:"deadline"`
	Left     *time.Time `json:"left"`
	// TunnelURL is where the node's agent serves tunnels to its
	// environments' exports (ws:// or wss://); empty when it serves none.
	TunnelURL string `json:"tunnelURL"`
	// Platform is the node's os/arch (linux/amd64, linux/arm64), as its
	// agent registered it; empty for an agent that did not say, which is
	// taken to run any platform.
	Platform string `json:"platform"`
	// Runtimes are the runtimes the node offers (process, container).
	Runtimes []string `json:"runtimes"`

	OrgID string `json:"-"`
	// KeyID is the node credential that registered it; only that credential
	// may act as the node.
	KeyID   string `json:"-"`
	Version int64  `json:"-"`
	// TunnelKey signs the node's tunnel tickets. The service made it at
	// registration and told only the registering agent; it is never listed.
	TunnelKey []byte `json:"-"`
	// Claims is the node's claim fence (store.ClaimEnvironments): never
	// listed.
	Claims NodeClaims `json:"-"`
}

// NodeClaims is what a claim of a node must see and move so that no two
// claims of it fill the same free capacity: Seq, moved by every claim
// (each is conditioned on the one it read), and Held, the environments
// claimed for the node and not yet seen to have left it. The environments
// index alone is eventually consistent in DynamoDB and may not show a
// claim just made; Held does, since it is written with each claim.
type NodeClaims struct {
	Seq  int64
	Held []string
}

// MayHold is every environment the node may hold: those its index lists
// and those its claim fence holds, each once. It is never fewer than what
// the node holds (an environment leaves Held only when a claim read it and
// found it no longer the node's, and never comes back but by a claim, which
// puts it in Held again), but may name environments that have ended since
// a claim last read them, or that the index still lists. A claim that fits
// the node's capacity even counting all of them needs no read of them.
func (n Node) MayHold(listed []string) []string {
	out := append([]string(nil), listed...)
	in := make(map[string]bool, len(listed)+len(n.Claims.Held))
	for _, id := range listed {
		in[id] = true
	}
	for _, id := range n.Claims.Held {
		if !in[id] {
			in[id] = true
			out = append(out, id)
		}
	}
	return out
}

// ErrClaimRaced is a claim refused because another claim of the same node
// committed after the node was read: the claimer reads the node and what it
// holds again and claims again. A 409 should it ever reach a node.
var ErrClaimRaced = Errorf(CodeConflict, "another claim of this node came first; claim again")

// RuntimesOrDefault are the runtimes the node offers: process for a node
// registered before nodes said.
func (n Node) RuntimesOrDefault() []string {
	if len(n.Runtimes) == 0 {
		return []string{RuntimeProcess}
	}
	return n.Runtimes
}

// Needs is what an environment asks of the node that runs it.
type Needs struct {
	// Runtime is the template's runtime; empty means process.
	Runtime string
	// Platforms are the template's platforms; empty means any.
	Platforms []string
}

// NeedsOf is what a template's environments ask of a node.
func NeedsOf(t Template) Needs {
	var ps []string
	if len(t.Platforms) > 0 {
		ps = slices.Clone(t.Platforms)
		sort.Strings(ps)
	}
	rt := t.RuntimeOrDefault()
	// A runtime the service does not know (a template written by another
	// version, refused by today's validation) asks nothing of the node: its
	// agent is the one to judge, and fails the environment saying why.
	if rt == RuntimeProcess || !slices.Contains(Runtimes, rt) {
		rt = ""
	}
	return Needs{Runtime: rt, Platforms: ps}
}

// Class names the environments that ask the same of a node: "" for a
// process on any platform (most of them), otherwise the runtime and the
// sorted platforms, such as "container:linux/amd64,linux/arm64". A pool's
// pending environments are indexed per class, so a node looks only where
// there is work it can run and an environment no node of the pool can run
// never hides one that a node can.
func (n Needs) Class() string {
	if n.Runtime == "" && len(n.Platforms) == 0 {
		return ""
	}
	rt := n.Runtime
	if rt == "" {
		rt = RuntimeProcess
	}
	ps := slices.Clone(n.Platforms)
	sort.Strings(ps)
	return rt + ":" + strings.Join(ps, ",")
}

// String says what is needed, for errors: "runtime container on linux/arm64".
func (n Needs) String() string {
	rt := n.Runtime
	if rt == "" {
		rt = RuntimeProcess
	}
	if len(n.Platforms) == 0 {
		return "runtime " + rt + " on any platform"
	}
	return "runtime " + rt + " on " + strings.Join(n.Platforms, " or ")
}

// Runs reports whether the node can run what needs asks.
func (n Node) Runs(needs Needs) bool {
	rt := needs.Runtime
	if rt == "" {
		rt = RuntimeProcess
	}
	// A node that did not state its platform (an agent from before nodes
	// did) is taken to run any, as every node was before.
	return slices.Contains(n.RuntimesOrDefault(), rt) && (n.Platform == "" || PlatformMatches(needs.Platforms, n.Platform))
}

// Offers says what the node offers, for errors: "runtimes process, container on linux/amd64".
func (n Node) Offers() string {
	p := n.Platform
	if p == "" {
		p = "an unstated platform"
	}
	return fmt.Sprintf("runtimes %s on %s", strings.Join(n.RuntimesOrDefault(), ", "), p)
}
