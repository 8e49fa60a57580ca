package netstack

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// dnsTTL is the TTL of the answers: short, so a program asks again (and
// is decided again) rather than hold an address past a rule change.
const dnsTTL = 30

// answer answers one DNS message of the environment's: A questions from
// the node's resolver, when the policy lets the name be resolved at all;
// AAAA and every other type with no records (the environment has no IPv6
// route; what it may reach, it reaches by A).
func (b *Boundary) answer(ctx context.Context, q *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	qq := q.Question[0]
	name := strings.TrimSuffix(strings.ToLower(qq.Name), ".")
	start := b.cfg.Now()
	r := Record{Time: start, Proto: ProtoDNS, Name: name, Type: dns.TypeToString[qq.Qtype]}
	defer func() {
		r.Duration = float64(b.cfg.Now().Sub(start).Microseconds()) / 1000
		b.record(r)
	}()
	d := b.decideName(name)
	r.Rule = d.Rule
	if !d.Allow {
		r.Verdict = VerdictDeny
		m.Rcode = dns.RcodeRefused
		return m
	}
	r.Verdict = VerdictAllow
	if qq.Qclass != dns.ClassINET || qq.Qtype != dns.TypeA {
		return m
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := b.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			m.Rcode = dns.RcodeNameError
			r.Error = "no such name"
		} else {
			m.Rcode = dns.RcodeServerFailure
			r.Verdict, r.Error = VerdictFailed, err.Error()
		}
		return m
	}
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() {
			continue
		}
		b.names.add(a, name)
		r.Answers = append(r.Answers, a.String())
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
			A:   net.IP(a.AsSlice()),
		})
	}
	return m
}
