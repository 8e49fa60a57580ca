package netpolicy

import (
	"fmt"
	"net/netip"
)

// Modes of a policy.
const (
	// ModeNone: nothing beyond the environment itself.
	ModeNone = "none"
	// ModeOpen: every public address, less the deny entries.
	ModeOpen = "open"
	// ModeRules: what an allow entry names and no deny entry names.
	ModeRules = "rules"
)

// Rules are the allow and deny entries of a policy, as written.
type Rules struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Empty says the rules hold no entry.
func (r Rules) Empty() bool { return len(r.Allow) == 0 && len(r.Deny) == 0 }

// Policy is a mode with its rules, compiled.
type Policy struct {
	Mode  string
	Rules Rules
	allow []Entry
	deny  []Entry
}

// Compile parses and checks a policy: a known mode, at most MaxEntries
// entries, each one parsing; allow entries only in rules mode (open allows
// every public address already, none nothing at all).
func Compile(mode string, r Rules) (*Policy, error) {
	switch mode {
	case ModeNone, ModeOpen, ModeRules:
	default:
		return nil, fmt.Errorf("network mode must be %q, %q or %q, not %q", ModeNone, ModeOpen, ModeRules, mode)
	}
	if n := len(r.Allow) + len(r.Deny); n > MaxEntries {
		return nil, fmt.Errorf("a network policy holds at most %d entries, this one %d", MaxEntries, n)
	}
	if mode != ModeRules && len(r.Allow) > 0 {
		return nil, &EntryError{Entry: r.Allow[0], Reason: fmt.Sprintf("allow entries need mode %q (mode %q allows %s already)", ModeRules, mode, map[string]string{ModeOpen: "every public address", ModeNone: "nothing, whatever is listed"}[mode])}
	}
	p := &Policy{Mode: mode, Rules: r}
	for _, s := range r.Allow {
		e, err := ParseEntry(s)
		if err != nil {
			return nil, err
		}
		p.allow = append(p.allow, e)
	}
	for _, s := range r.Deny {
		e, err := ParseEntry(s)
		if err != nil {
			return nil, err
		}
		p.deny = append(p.deny, e)
	}
	return p, nil
}

// MustCompile is Compile for policies known to be valid.
func MustCompile(mode string, r Rules) *Policy {
	p, err := Compile(mode, r)
	if err != nil {
		panic(err)
	}
	return p
}

// Target is what a connection goes to: its address and port and the names
// it is known by (those whose DNS answers to the environment held the
// address, or the name its TLS ClientHello or HTTP request carried).
type Target struct {
	Addr  netip.Addr
	Port  uint16
	Names []string
}

// Decision is a verdict and the rule that gave it, as the network log
// shows it: "deny evil.example", "allow *.pypi.org:443", "open",
// "no allow entry", "mode none".
type Decision struct {
	Allow bool
	Rule  string
}

// Decide judges a connection. Deny wins: a connection that a deny entry
// names is refused whatever allows it; otherwise open mode allows it, and
// rules mode allows it when an allow entry names it. Order within a list
// does not matter.
func (p *Policy) Decide(t Target) Decision {
	if p == nil || p.Mode == ModeNone {
		return Decision{Rule: "mode none"}
	}
	for _, e := range p.deny {
		if e.matches(t.Addr, t.Port, t.Names) {
			return Decision{Rule: "deny " + e.Text}
		}
	}
	if p.Mode == ModeOpen {
		return Decision{Allow: true, Rule: "open"}
	}
	for _, e := range p.allow {
		if e.matches(t.Addr, t.Port, t.Names) {
			return Decision{Allow: true, Rule: "allow " + e.Text}
		}
	}
	return Decision{Rule: "no allow entry"}
}

// DecideName judges a DNS question for name: refused when a deny entry
// names it on every port, or in rules mode when no allow entry could allow
// a connection to what it resolves to (no entry names it and none is by
// address). Answering only such names keeps an environment from asking the
// node's resolver about anything it likes, a channel out of its own.
func (p *Policy) DecideName(name string) Decision {
	if p == nil || p.Mode == ModeNone {
		return Decision{Rule: "mode none"}
	}
	for _, e := range p.deny {
		if e.PortLo == 0 && e.MatchesName(name) {
			return Decision{Rule: "deny " + e.Text}
		}
	}
	if p.Mode == ModeOpen {
		return Decision{Allow: true, Rule: "open"}
	}
	for _, e := range p.allow {
		if e.MatchesName(name) {
			return Decision{Allow: true, Rule: "allow " + e.Text}
		}
	}
	for _, e := range p.allow {
		if e.Domain == "" {
			return Decision{Allow: true, Rule: "allow " + e.Text}
		}
	}
	return Decision{Rule: "no allow entry"}
}

// Layers are policies that must all allow: the template's, then the
// environment's own (its lease's, or what was set on it since), so the
// second can narrow the first and never widen it.
type Layers []*Policy

// Decide is the first refusal of a layer, else the last layer's allowance
// (the most specific one).
func (ls Layers) Decide(t Target) Decision {
	var d Decision
	for _, p := range ls {
		if p == nil {
			continue
		}
		if d = p.Decide(t); !d.Allow {
			return d
		}
	}
	if d.Rule == "" {
		return Decision{Rule: "mode none"}
	}
	return d
}

// DecideName is Decide for a DNS question.
func (ls Layers) DecideName(name string) Decision {
	var d Decision
	for _, p := range ls {
		if p == nil {
			continue
		}
		if d = p.DecideName(name); !d.Allow {
			return d
		}
	}
	if d.Rule == "" {
		return Decision{Rule: "mode none"}
	}
	return d
}
