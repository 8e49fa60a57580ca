package agent

import (
	"context"
	"net"
	"net/netip"

	"github.com/envlease/envlease/shared/agent/netstack"
)

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
