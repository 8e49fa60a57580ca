// Package netguard classifies IP addresses: which are public, and why
// another one is not (loopback, private, link-local, ...). Whatever dials on
// behalf of someone else, webhook deliveries and environments' egress, asks
// it on the very address being dialed, after DNS, so a name that resolves
// to a public address once and a private one later is still refused.
package netguard

import "net/netip"

// blocked are the address ranges no guarded connection may reach, with the
// name each refusal gives.
var blocked = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "reserved"}, // the old 6to4 relay anycast
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "reserved"},     // IPv4-compatible (deprecated): ::10.0.0.1
	{netip.MustParsePrefix("100::/64"), "reserved"},  // discard-only
	{netip.MustParsePrefix("2001::/32"), "reserved"}, // Teredo: a tunnel to an address it hides
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "reserved"}, // local-use NAT64: translates into private networks
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// IPv6 forms that carry an IPv4 address. Only the IPv4-mapped form
// (::ffff:a.b.c.d) is judged by the address inside: it is not an IPv6
// destination at all but the socket API's spelling of an IPv4 one, so the
// dialer connects over IPv4 to exactly that address and the IPv4 rules are
// exact. Every other form is refused whatever it carries: whether a packet to
// it reaches the embedded host, or another one, is decided by a translator or
// relay on the path (a NAT64 gateway or SIIT translator in the service's own
// network, a 6to4 or Teredo relay), which the guard cannot see, and a
// receiver that has an IPv4 address publishes it as such. Decoding them would
// trust rules this guard cannot check; refusing costs no real receiver.
// The IPv4-compatible form (::/96), Teredo (2001::/32) and local-use NAT64
// (64:ff9b:1::/48) are in blocked; the forms below name the embedded
// address's class when it has one, so the refusal says what it would reach.
var embedding = []struct {
	prefix netip.Prefix
	at     int // the byte the IPv4 address starts at
	form   string
}{
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12, "IPv4-translated"}, // SIIT (RFC 2765)
	{netip.MustParsePrefix("64:ff9b::/96"), 12, "NAT64"},              // well-known NAT64 prefix (RFC 6052)
	{netip.MustParsePrefix("2002::/16"), 2, "6to4"},                   // RFC 3056, deprecated (RFC 7526)
}

// Class returns why ip is not a public address ("loopback", "private",
// ...), or "" for a public address. allowLoopback lets loopback through (a
// local stack's receivers), never through an IPv4-embedding form other than
// the mapped one.
func Class(ip netip.Addr, allowLoopback bool) string {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		// ::ffff:10.0.0.1 is 10.0.0.1.
		ip = ip.Unmap()
	}
	if ip.Is6() {
		b := ip.As16()
		for _, e := range embedding {
			if e.prefix.Contains(ip) {
				v4 := netip.AddrFrom4([4]byte{b[e.at], b[e.at+1], b[e.at+2], b[e.at+3]})
				if class := Class(v4, false); class != "" {
					return class
				}
				return e.form
			}
		}
	}
	if ip == netip.IPv4Unspecified() || ip == netip.MustParseAddr("255.255.255.255") {
		return "unspecified"
	}
	for _, b := range blocked {
		if b.prefix.Contains(ip) {
			if b.class == "loopback" && allowLoopback {
				return ""
			}
			return b.class
		}
	}
	if !ip.IsValid() {
		return "invalid"
	}
	return ""
}
