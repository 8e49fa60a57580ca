//go:build linux

package netstack

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/miekg/dns"

	"github.com/envlease/envlease/shared/netpolicy"
)

// IPv6 is refused cleanly: a name with IPv6 addresses is answered with its
// IPv4 ones only (AAAA: no error, no records, so a resolver falls back at
// once), the environment has no IPv6 route, so a connection to an IPv6
// address fails at once in the environment's own kernel, and the stack's
// IPv6 link-local address, which the device gets, is refused by the guard
// like every address of its kind.
func TestBoundaryIPv6Refused(t *testing.T) {
	needRoot(t)
	port := serveHTTP(t)
	res := fakeResolver{"dual.test": {netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("2001:db8::10")}}
	p := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeOpen, netpolicy.Rules{})}
	e := newEnv(t, p, res)

	ask := func(qtype uint16) *dns.Msg {
		t.Helper()
		var c net.Conn
		c, err := e.dialIn(t, "udp", net.JoinHostPort(StackAddr.String(), "53"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		q := new(dns.Msg)
		q.SetQuestion("dual.test.", qtype)
		dc := &dns.Conn{Conn: c}
		if err := dc.WriteMsg(q); err != nil {
			t.Fatal(err)
		}
		m, err := dc.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := ask(dns.TypeAAAA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Errorf("AAAA: rcode %s, %d answers; want no error and none", dns.RcodeToString[m.Rcode], len(m.Answer))
	}
	if m := ask(dns.TypeA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("A: rcode %s, answers %v", dns.RcodeToString[m.Rcode], m.Answer)
	}
	// The resolver of a program: the name resolves to its IPv4 address,
	// which the boundary carries.
	addrs, err := e.resolver(t).LookupNetIP(context.Background(), "ip", "dual.test")
	if err != nil || len(addrs) != 1 || !addrs[0].Is4() {
		t.Fatalf("lookup: %v %v", addrs, err)
	}
	c, err := e.dialIn(t, "tcp", net.JoinHostPort(addrs[0].String(), strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("dial the IPv4 address: %v", err)
	}
	c.Close()
	// No IPv6 route: the environment's kernel refuses at once.
	if c, err := e.dialIn(t, "tcp", net.JoinHostPort("2001:db8::10", strconv.Itoa(port))); err == nil {
		c.Close()
		t.Fatal("a connection to an IPv6 address got through")
	}
	// The device's own link, where the kernel gave it a link-local address:
	// the guard refuses it (or, without IPv6 in the namespace, the kernel).
	if c, err := e.dialIn(t, "tcp", net.JoinHostPort("fe80::1%"+LinkName, strconv.Itoa(port))); err == nil {
		c.Close()
		t.Fatal("a connection to an IPv6 link-local address got through")
	}
}
