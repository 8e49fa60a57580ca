//go:build linux

package netstack

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/envlease/envlease/shared/netpolicy"
)

// udpIdle ends a UDP flow nothing went through for this long.
const udpIdle = time.Minute

// dnsIdle ends a DNS flow (UDP, one source port) or connection (TCP) that
// asked nothing for this long: a resolver asks again on a new one.
const dnsIdle = 10 * time.Second

// udp takes the first datagram of a flow (source and destination address
// and port): DNS is answered by the agent, a refused flow's datagrams are
// dropped, an allowed one gets a socket on the node of its own, kept
// until it idles.
func (b *Boundary) udp(r *udp.ForwarderRequest) {
	id := r.ID()
	addr, port := addrOf(id.LocalAddress), id.LocalPort
	if port == 53 {
		// Each source port's DNS flow holds a goroutine and an endpoint
		// until it idles (dnsIdle), so it takes a place within the bound.
		lim, ok := b.admit()
		if !ok {
			b.refuse(ProtoUDP, netpolicy.Target{Addr: addr, Port: port}, "", lim)
			return
		}
		var wq waiter.Queue
		ep, err := r.CreateEndpoint(&wq)
		if err != nil {
			b.release()
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer b.release()
			b.dnsUDP(gonet.NewUDPConn(&wq, ep))
		}()
		return
	}
	t := netpolicy.Target{Addr: addr, Port: port, Names: b.names.of(addr)}
	d := b.decide(t)
	if !d.Allow {
		b.refuse(ProtoUDP, t, "dns", d)
		return
	}
	lim, ok := b.admit()
	if !ok {
		b.refuse(ProtoUDP, t, "dns", lim)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		b.release()
		return
	}
	in := gonet.NewUDPConn(&wq, ep)
	f := &flow{b: b, proto: ProtoUDP, addr: addr, port: port, start: b.cfg.Now(), names: t.Names, rule: d.Rule}
	if len(t.Names) > 0 {
		f.nameFrom = "dns"
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.release()
		out, err := b.cfg.Dial(b.ctx, "udp", net.JoinHostPort(addr.String(), strconv.Itoa(int(port))))
		if err != nil {
			in.Close()
			b.record(Record{Time: f.start, Proto: ProtoUDP, Addr: addr.String(), Port: port, Name: first(t.Names), NameFrom: f.nameFrom,
				Rule: d.Rule, Verdict: VerdictFailed, Error: err.Error()})
			return
		}
		f.in, f.out = in, out
		if !b.track(f) {
			f.close()
			return
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			pump(out, in, &f.received)
			f.close()
		}()
		pump(in, out, &f.sent)
		f.close()
		wg.Wait()
		f.finish("")
	}()
}

// pump copies datagrams from src to dst until src idles or either fails.
func pump(src, dst net.Conn, n interface{ Add(int64) int64 }) {
	buf := make([]byte, 64<<10)
	for {
		_ = src.SetReadDeadline(time.Now().Add(udpIdle))
		k, err := src.Read(buf)
		if err != nil {
			return
		}
		if _, err := dst.Write(buf[:k]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		n.Add(int64(k))
		// The other direction's idle clock: an answer keeps it alive too.
		_ = dst.SetReadDeadline(time.Now().Add(udpIdle))
	}
}

// dnsUDP answers the DNS questions of one flow (one source port of the
// environment's), until it idles.
func (b *Boundary) dnsUDP(c *gonet.UDPConn) {
	defer c.Close()
	stop := contextAfter(b, func() { c.Close() })
	defer stop()
	buf := make([]byte, 64<<10)
	for {
		_ = c.SetReadDeadline(time.Now().Add(dnsIdle))
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		q := new(dns.Msg)
		if q.Unpack(buf[:n]) != nil {
			continue
		}
		m := b.answer(b.ctx, q)
		// An answer too large for a datagram is cut, so the resolver asks
		// again over TCP.
		m.Truncate(dnsUDPSize(q))
		out, err := m.Pack()
		if err != nil {
			continue
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func dnsUDPSize(q *dns.Msg) int {
	if o := q.IsEdns0(); o != nil {
		return int(o.UDPSize())
	}
	return dns.MinMsgSize
}
