// Package netpolicy holds an environment's network policy: its mode (none,
// open, rules), its allow and deny entries (domains with "*." wildcards,
// addresses and CIDRs, each with an optional port or port range), how they
// are parsed and validated, and how a connection or a DNS question is
// decided by them. The API validates with it and the node agent decides
// with it, so both read an entry the same way. See docs/nodes.md, "Network
// policy".
package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// MaxEntries bounds the entries of one policy, allow and deny together.
const MaxEntries = 256

// Entry is one parsed allow or deny entry.
type Entry struct {
	// Text is the entry as written (normalized to lower case), which the
	// network log names as the rule that decided.
	Text string
	// Domain is set for a name entry; Wildcard says it was "*.Domain",
	// which matches every name below Domain but not Domain itself.
	Domain   string
	Wildcard bool
	// Prefix is set for an address entry; AnyAddr for "*".
	Prefix  netip.Prefix
	AnyAddr bool
	// Ports is the inclusive port range, 0-0 for every port.
	PortLo, PortHi uint16
}

// EntryError is an entry that does not parse, with why.
type EntryError struct {
	Entry  string
	Reason string
}

func (e *EntryError) Error() string { return fmt.Sprintf("network entry %q: %s", e.Entry, e.Reason) }

// ParseEntry reads one entry:
//
//	github.com            the name, every port
//	*.pypi.org:443        every name below pypi.org, port 443
//	203.0.113.7           one address
//	203.0.113.0/24:22     a CIDR, port 22
//	[2001:db8::1]:443     an IPv6 address with a port
//	*:8000-8100           every address, ports 8000 to 8100
func ParseEntry(s string) (Entry, error) {
	text := strings.ToLower(strings.TrimSpace(s))
	bad := func(format string, args ...any) (Entry, error) {
		return Entry{}, &EntryError{Entry: s, Reason: fmt.Sprintf(format, args...)}
	}
	if text == "" {
		return bad("empty")
	}
	e := Entry{Text: text}
	host, ports := text, ""
	switch {
	case strings.HasPrefix(text, "["):
		end := strings.Index(text, "]")
		if end < 0 {
			return bad("a \"[\" without \"]\"")
		}
		host = text[1:end]
		rest := text[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return bad("after \"]\" only \":PORT\" may follow")
			}
			ports = rest[1:]
		}
	case strings.Count(text, ":") == 1:
		host, ports, _ = strings.Cut(text, ":")
	case strings.Count(text, ":") > 1:
		// A bare IPv6 address or CIDR: a port needs brackets.
	}
	if ports != "" || strings.HasSuffix(text, ":") {
		lo, hi, err := parsePorts(ports)
		if err != nil {
			return bad("%v", err)
		}
		e.PortLo, e.PortHi = lo, hi
	}
	switch {
	case host == "*":
		e.AnyAddr = true
	case strings.Contains(host, "/"):
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return bad("not a CIDR: %v", err)
		}
		if p.Masked() != p {
			return bad("a CIDR's address has bits beyond its length (%s is %s)", p, p.Masked())
		}
		e.Prefix = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr()))
	default:
		if ip, err := netip.ParseAddr(host); err == nil {
			ip = ip.Unmap().WithZone("")
			e.Prefix = netip.PrefixFrom(ip, ip.BitLen())
			break
		}
		d := strings.TrimSuffix(host, ".")
		if w, ok := strings.CutPrefix(d, "*."); ok {
			e.Wildcard, d = true, w
		}
		if err := checkDomain(d); err != nil {
			return bad("%v", err)
		}
		if !strings.Contains(d, ".") && e.Wildcard {
			return bad("a wildcard needs at least two labels after \"*.\" (\"*.com\" would allow a whole top-level domain)")
		}
		e.Domain = d
	}
	return e, nil
}

func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

func parsePorts(s string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	p := func(v string) (uint16, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return 0, fmt.Errorf("port %q is not a number from 1 to 65535", v)
		}
		return uint16(n), nil
	}
	if lo, err = p(a); err != nil {
		return 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = p(b); err != nil {
			return 0, 0, err
		}
		if hi < lo {
			return 0, 0, fmt.Errorf("port range %s ends before it starts", s)
		}
	}
	return lo, hi, nil
}

// checkDomain accepts a DNS name of letters, digits, hyphens and
// underscores (SRV-style labels), each label 1 to 63 bytes, 253 in all.
func checkDomain(d string) error {
	if d == "" || len(d) > 253 {
		return fmt.Errorf("not a domain name, an address, a CIDR or \"*\"")
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("domain label %q must be 1 to 63 characters", l)
		}
		for _, c := range l {
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Errorf("%q is not a domain name (a label holds letters, digits, \"-\" and \"_\"; \"*.\" only at the start)", d)
			}
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("domain label %q starts or ends with \"-\"", l)
		}
	}
	return nil
}

// MatchesName says whether the entry names name (a domain entry only).
func (e Entry) MatchesName(name string) bool {
	if e.Domain == "" {
		return false
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if e.Wildcard {
		return strings.HasSuffix(name, "."+e.Domain)
	}
	return name == e.Domain
}

// MatchesPort says whether port is in the entry's range.
func (e Entry) MatchesPort(port uint16) bool {
	return e.PortLo == 0 || port >= e.PortLo && port <= e.PortHi
}

// matches says whether the entry covers a connection to addr:port known
// by names.
func (e Entry) matches(addr netip.Addr, port uint16, names []string) bool {
	if !e.MatchesPort(port) {
		return false
	}
	switch {
	case e.AnyAddr:
		return true
	case e.Prefix.IsValid():
		return e.Prefix.Contains(addr.Unmap())
	}
	for _, n := range names {
		if e.MatchesName(n) {
			return true
		}
	}
	return false
}
