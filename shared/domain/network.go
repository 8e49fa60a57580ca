package domain

import (
	"fmt"

	"github.com/envlease/envlease/shared/netpolicy"
)

// The network modes of the transparent boundary (docs/nodes.md, "Network
// boundary"): NetworkOpen reaches every public address, less the template's
// deny entries; NetworkRules reaches what an allow entry names and no deny
// entry does. Both reach out without any proxy setting, TCP and UDP, DNS
// answered by the agent, every connection in the environment's network log.
const (
	NetworkOpen  = "open"
	NetworkRules = "rules"
)

// EventEnvNetRefused is the event of connections an environment's network
// boundary refused, a batch of at most a few seconds' (docs/nodes.md,
// "Network boundary").
const EventEnvNetRefused = "environment.network.refused"

// Transparent says whether t's environments go out through the network
// boundary rather than the HTTP proxy (NetworkEgress) or not at all.
func (t Template) Transparent() bool {
	return t.Network == NetworkOpen || t.Network == NetworkRules
}

// NetworkPolicy is the template's network policy, compiled: none for
// "none" and "egress" (which the boundary does not serve).
func (t Template) NetworkPolicy() (*netpolicy.Policy, error) {
	var r netpolicy.Rules
	if t.NetworkRules != nil {
		r = *t.NetworkRules
	}
	mode := netpolicy.ModeNone
	if t.Transparent() {
		mode = t.Network
	}
	if mode == netpolicy.ModeNone {
		r = netpolicy.Rules{}
	}
	return netpolicy.Compile(mode, r)
}

// validateNetwork checks the template's network: a mode there is, entries
// only with a mode that reads them, each one parsing (422 naming it).
func (t Template) validateNetwork() error {
	switch t.Network {
	case "", NetworkNone, NetworkEgress, NetworkOpen, NetworkRules:
	default:
		return Invalid("network", "network must be %q (the default), %q, %q or %q, %s has %q",
			NetworkNone, NetworkOpen, NetworkRules, NetworkEgress, t.Name, t.Network)
	}
	if t.NetworkRules == nil || t.NetworkRules.Empty() {
		return nil
	}
	if !t.Transparent() {
		return Invalid("networkRules", "networkRules need network %q or %q, %s has %q", NetworkOpen, NetworkRules, t.Name, t.Network)
	}
	return ValidateNetworkRules("networkRules", t.Network, *t.NetworkRules)
}

// ValidateNetworkRules checks rules under mode, naming the first bad entry
// as field.allow[i] or field.deny[i].
func ValidateNetworkRules(field, mode string, r netpolicy.Rules) error {
	if n := len(r.Allow) + len(r.Deny); n > netpolicy.MaxEntries {
		return Invalid(field, "a network policy holds at most %d entries (allow and deny together), this one %d", netpolicy.MaxEntries, n)
	}
	for list, entries := range map[string][]string{"allow": r.Allow, "deny": r.Deny} {
		for i, s := range entries {
			if _, err := netpolicy.ParseEntry(s); err != nil {
				return Invalid(fmt.Sprintf("%s.%s[%d]", field, list, i), "%v", err)
			}
		}
	}
	if _, err := netpolicy.Compile(mode, r); err != nil {
		return Invalid(field, "%v", err)
	}
	return nil
}

// EnvNetwork is an environment's own layer of its network policy: set at
// lease (to narrow the template's for one run) and replaced while it runs
// (PATCH /v1/environments/{id}/network). A connection needs the
// template's policy and this layer both to allow it, so the layer can
// narrow the template's and never widen it. With allow entries it allows
// only what they name; without, everything the template allows, less its
// deny entries.
type EnvNetwork struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
	// Version is the environment record's version that set this layer (0:
	// the layer of its lease). A node reports the version it applies in its
	// heartbeats, and the service sends the layer again when the node's is
	// older: a lost push is made good (docs/nodes.md, "Network boundary").
	Version int64 `json:"version,omitempty"`
}

// Policy is the layer compiled.
func (n EnvNetwork) Policy() (*netpolicy.Policy, error) {
	mode := netpolicy.ModeOpen
	if len(n.Allow) > 0 {
		mode = netpolicy.ModeRules
	}
	return netpolicy.Compile(mode, netpolicy.Rules{Allow: n.Allow, Deny: n.Deny})
}

// Normalized has empty lists rather than absent ones.
func (n EnvNetwork) Normalized() EnvNetwork {
	if n.Allow == nil {
		n.Allow = []string{}
	}
	if n.Deny == nil {
		n.Deny = []string{}
	}
	return n
}

// ValidateEnvNetwork checks an environment's own layer against its
// template: only a template with network open or rules has one, and each
// entry must parse (422 naming it as field.allow[i] or field.deny[i]).
func ValidateEnvNetwork(field string, t Template, n EnvNetwork) error {
	if !t.Transparent() {
		return Invalid(field, "template %s has network %q: network rules need a template with network %q or %q", t.Name, t.Normalized().Network, NetworkOpen, NetworkRules)
	}
	mode := netpolicy.ModeOpen
	if len(n.Allow) > 0 {
		mode = netpolicy.ModeRules
	}
	return ValidateNetworkRules(field, mode, netpolicy.Rules{Allow: n.Allow, Deny: n.Deny})
}
