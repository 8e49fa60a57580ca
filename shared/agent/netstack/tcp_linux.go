//go:build linux

package netstack

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/envlease/envlease/shared/netpolicy"
)

// tcp takes a connection the environment opens (its SYN): refused ones
// are reset at once, so the program sees "connection refused"; allowed
// ones are dialed from the node first and only then accepted, so a
// destination that refuses or cannot be reached looks the same from
// inside. Both happen off the stack's packet path.
func (b *Boundary) tcp(r *tcp.ForwarderRequest) {
	id := r.ID()
	addr, port := addrOf(id.LocalAddress), id.LocalPort
	if port == 53 {
		// A DNS connection holds a goroutine and a socket of the stack
		// like any other, so it takes a place within the bound too.
		if lim, ok := b.admit(); !ok {
			r.Complete(true)
			b.refuse(ProtoTCP, netpolicy.Target{Addr: addr, Port: port}, "", lim)
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer b.release()
			b.dnsTCP(r)
		}()
		return
	}
	t := netpolicy.Target{Addr: addr, Port: port, Names: b.names.of(addr)}
	d := b.decide(t)
	if !d.Allow {
		r.Complete(true)
		b.refuse(ProtoTCP, t, "dns", d)
		return
	}
	if lim, ok := b.admit(); !ok {
		r.Complete(true)
		b.refuse(ProtoTCP, t, "dns", lim)
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.release()
		f := &flow{b: b, proto: ProtoTCP, addr: addr, port: port, start: b.cfg.Now(), names: t.Names, rule: d.Rule}
		if len(t.Names) > 0 {
			f.nameFrom = "dns"
		}
		out, err := b.cfg.Dial(b.ctx, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(int(port))))
		if err != nil {
			r.Complete(true)
			b.record(Record{Time: f.start, Proto: ProtoTCP, Addr: addr.String(), Port: port, Name: first(t.Names), NameFrom: f.nameFrom,
				Rule: d.Rule, Verdict: VerdictFailed, Error: err.Error()})
			return
		}
		var wq waiter.Queue
		ep, terr := r.CreateEndpoint(&wq)
		if terr != nil {
			r.Complete(true)
			out.Close()
			return
		}
		r.Complete(false)
		f.in, f.out = gonet.NewTCPConn(&wq, ep), out
		if !b.track(f) {
			f.close()
			return
		}
		b.relay(f)
	}()
}

// relay copies both ways until both ends are done. What the environment
// sends first is read for a name (SNI, Host) and decided again on it
// before any of it goes out: an address allowed for one name does not
// carry another.
func (b *Boundary) relay(f *flow) {
	var wg sync.WaitGroup
	back := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = copyCounted(f.in, f.out, &f.received)
			closeWrite(f.in)
		}()
	}
	// Where a secret may be added (HTTPS, with secrets bound), nothing of
	// the server's passes before the server name is read: the connection
	// may be one the boundary terminates (intercept.go). Elsewhere the
	// server may speak first, and its bytes pass at once.
	clientFirst := b.sec != nil && f.port == interceptPort
	if !clientFirst {
		back()
	}
	var errText string
	head, name, kind, err := sniff(f.in)
	switch {
	case name != "":
		b.mu.Lock()
		f.names, f.nameFrom = []string{name}, kind
		d := b.decideLocked(f.target())
		f.rule = d.Rule
		b.mu.Unlock()
		if !d.Allow {
			f.close()
			wg.Wait()
			b.untrack(f)
			b.refuse(ProtoTCP, f.target(), kind, d)
			return
		}
	case kind != "":
		// TLS or HTTP whose name could not be read: decided on the
		// address alone, so a name the rules deny cannot ride on an
		// address that also serves a name they allow.
		b.mu.Lock()
		dnsNames := f.names
		f.names, f.nameFrom = nil, ""
		d := b.decideLocked(f.target())
		f.rule = d.Rule
		b.mu.Unlock()
		if !d.Allow {
			f.close()
			wg.Wait()
			b.untrack(f)
			r := Record{Time: b.cfg.Now(), Proto: ProtoTCP, Addr: f.addr.String(), Port: f.port, Rule: d.Rule, Verdict: VerdictDeny,
				Error: unnamed[kind]}
			if len(dnsNames) > 0 {
				r.Name, r.NameFrom = dnsNames[0], "dns"
			}
			b.record(r)
			return
		}
	}
	if clientFirst {
		if err == nil && kind == "sni" && b.sec.binds(name, f.port) {
			b.intercept(f, head, name)
			return
		}
		back()
	}
	if len(head) > 0 {
		if _, werr := (counter{f.out, &f.sent}).Write(head); werr != nil {
			err = werr
		}
	}
	if err == nil {
		err = copyCounted(f.out, f.in, &f.sent)
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		errText = err.Error()
	}
	closeWrite(f.out)
	wg.Wait()
	f.finish(errText)
}

// dnsTCP answers DNS over TCP (what a resolver falls back to for a large
// answer) on one connection, until it is silent for dnsIdle between
// questions.
func (b *Boundary) dnsTCP(r *tcp.ForwarderRequest) {
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		return
	}
	r.Complete(false)
	c := &dns.Conn{Conn: gonet.NewTCPConn(&wq, ep)}
	stop := context.AfterFunc(b.ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	for {
		_ = c.SetReadDeadline(time.Now().Add(dnsIdle))
		q, err := c.ReadMsg()
		if err != nil {
			return
		}
		if err := c.WriteMsg(b.answer(b.ctx, q)); err != nil {
			return
		}
	}
}

// unnamed says why a connection was decided on its address alone, by
// what its first bytes looked like.
var unnamed = map[string]string{
	"sni":  "no server name could be read from the TLS handshake: decided on the address alone",
	"host": "no Host could be read from the HTTP request: decided on the address alone",
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
