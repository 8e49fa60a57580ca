//go:build linux

package netstack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

const nicID tcpip.NICID = 1

// tcpMaxInFlight bounds the connections the environment has half-open
// (SYN received, the node's side still dialing) at once.
const tcpMaxInFlight = 1024

// flowBuf is the most each TCP flow's receive buffer, and its send
// buffer, in the stack may hold.
const flowBuf = 1 << 20

// Probe says whether boundaries can be made here: TUN devices and the
// agent's rights to make them in a namespace.
func Probe() error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("no TUN device: %w", err)
	}
	unix.Close(fd)
	return nil
}

// Open makes the boundary of the environment whose network namespace is
// h: the TUN device in h, its address and default route, and the stack
// behind it.
func Open(h netns.NsHandle, cfg Config) (*Boundary, error) {
	b := newBoundary(cfg)
	if cfg.Secrets != nil && len(cfg.Secrets.Bindings) > 0 {
		sec, err := newInterceptor(*cfg.Secrets, b.cfg.Now)
		if err != nil {
			return nil, err
		}
		b.sec = sec
	}
	fd, err := openTUN(h)
	if err != nil {
		return nil, err
	}
	ep, err := newTUNLink(fd, MTU)
	if err != nil {
		return nil, fmt.Errorf("TUN endpoint: %w", err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
	})
	b.stop = func() {
		s.Close()
		s.Wait()
		ep.Close()
		ep.waitReader()
	}
	fail := func(what string, e tcpip.Error) (*Boundary, error) {
		b.Close()
		return nil, fmt.Errorf("network stack: %s: %s", what, e)
	}
	sack := tcpip.TCPSACKEnabled(true)
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); e != nil {
		return fail("SACK", e)
	}
	// Each flow's receive and send buffers are at most flowBuf: enough
	// for one stream to keep a fast link busy, and small enough that an
	// environment's MaxFlows flows writing to servers that never read
	// cannot make the agent hold more than MaxFlows × 2 × flowBuf (8 GiB
	// at the defaults), memory outside the environment's cgroup.
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: flowBuf, Max: flowBuf}
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv); e != nil {
		return fail("receive buffer", e)
	}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: flowBuf, Max: flowBuf}
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd); e != nil {
		return fail("send buffer", e)
	}
	mod := tcpip.TCPModerateReceiveBufferOption(true)
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &mod); e != nil {
		return fail("receive buffer moderation", e)
	}
	// The handlers are set before the NIC exists: packets the
	// environment already sends are read as soon as it does, and the
	// stack reads its handlers without a lock.
	tf := tcp.NewForwarder(s, 0, tcpMaxInFlight, b.tcp)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tf.HandlePacket)
	uf := udp.NewForwarder(s, b.udp)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, uf.HandlePacket)
	if e := s.CreateNIC(nicID, ep); e != nil {
		return fail("NIC", e)
	}
	// Every destination is the stack's own: it takes connections to any
	// address (promiscuous) and answers from it (spoofing).
	if e := s.SetPromiscuousMode(nicID, true); e != nil {
		return fail("promiscuous mode", e)
	}
	if e := s.SetSpoofing(nicID, true); e != nil {
		return fail("spoofing", e)
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	return b, nil
}

// openTUN makes the TUN device in h (a TUN device lives in the namespace
// of the thread that made it), gives it the environment's address and a
// default route, and returns the agent's end of it.
func openTUN(h netns.NsHandle) (int, error) {
	fd := -1
	err := confine.InNamespace(h, func() error {
		var err error
		fd, err = openTUNDevice(LinkName)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("make the TUN device in the environment's namespace: %w", err)
	}
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netlink in the namespace: %w", err)
	}
	defer nl.Close()
	setUp := func() error {
		link, err := nl.LinkByName(LinkName)
		if err != nil {
			return err
		}
		if err := nl.LinkSetMTU(link, MTU); err != nil {
			return err
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: EnvAddr.AsSlice(), Mask: net.CIDRMask(24, 32)}}
		if err := nl.AddrAdd(link, addr); err != nil {
			return err
		}
		if err := nl.LinkSetUp(link); err != nil {
			return err
		}
		if lo, err := nl.LinkByName("lo"); err == nil {
			_ = nl.LinkSetUp(lo)
		}
		return nl.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Scope: netlink.SCOPE_LINK})
	}
	if err := setUp(); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("configure the TUN device: %w", err)
	}
	return fd, nil
}

func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip.Unmap()
}
