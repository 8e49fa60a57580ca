package agent

import (
	"context"
	"crypto/x509"
	"net"
	"net/netip"

	"github.com/envlease/envlease/shared/agent/netstack"
)

// BoundaryRoots makes network boundaries verify the servers they add
// secrets for against roots (a test's CA) instead of the system's.
func BoundaryRoots(roots *x509.CertPool) func(*Config) {
	return func(c *Config) { c.boundaryRoots = roots }
}

// BoundaryOutside makes network boundaries resolve names with res and dial
// through dial, and lets their guard pass allow: the tests' "outside"
// servers, which listen on the node's loopback behind addresses the
// environment can route to.
func BoundaryOutside(res netstack.Resolver, dial func(ctx context.Context, network, addr string) (net.Conn, error), allow ...netip.AddrPort) func(*Config) {
	return func(c *Config) {
		c.boundaryResolver, c.boundaryDial = res, dial
		c.egressAllow = append(c.egressAllow, allow...)
	}
}
