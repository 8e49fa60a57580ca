package netstack

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Protocols and verdicts of records.
const (
	ProtoTCP = "tcp"
	ProtoUDP = "udp"
	ProtoDNS = "dns"

	VerdictAllow = "allow"
	VerdictDeny  = "deny"
	// VerdictFailed: allowed, but the node could not reach it.
	VerdictFailed = "failed"
)

// Record is one line of an environment's network log: a connection (TCP)
// or flow (UDP) when it ends or is refused, or a DNS question when it is
// answered.
type Record struct {
	Time  time.Time `json:"time"`
	Proto string    `json:"proto"`
	// Addr and Port are the destination; for DNS, Name and Type are the
	// question and Answers what was answered.
	Addr string `json:"addr,omitempty"`
	Port uint16 `json:"port,omitempty"`
	Name string `json:"name,omitempty"`
	// NameFrom says where Name came from: "dns" (the environment's own
	// answers), "sni" or "host".
	NameFrom string   `json:"nameFrom,omitempty"`
	Type     string   `json:"type,omitempty"`
	Answers  []string `json:"answers,omitempty"`
	Rule     string   `json:"rule"`
	Verdict  string   `json:"verdict"`
	// Error is why an allowed connection failed, or what closed it early.
	Error string `json:"error,omitempty"`
	// Sent is what the environment sent, Received what it was sent.
	Sent     int64   `json:"sent"`
	Received int64   `json:"received"`
	Duration float64 `json:"durationMs"`
	// Secrets names the secrets the boundary added to the connection's
	// requests (never their values): it terminated its TLS to do so
	// (docs/secrets.md).
	Secrets []string `json:"secrets,omitempty"`
	// Suppressed counts the refusals not recorded, over the rate, since
	// the last one that was.
	Suppressed int64 `json:"suppressed,omitempty"`
}

// refusals bounds the refusals recorded: a program that retries without
// pause must not fill the log with them, nor the events that report them.
type refusals struct {
	lim     *rate.Limiter
	mu      sync.Mutex
	dropped int64
}

func newRefusals(perSecond float64) *refusals {
	return &refusals{lim: rate.NewLimiter(rate.Limit(perSecond), 100)}
}

// take says whether one more refusal is recorded, and how many were not
// since the last one that was.
func (r *refusals) take() (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.lim.Allow() {
		r.dropped++
		return 0, false
	}
	n := r.dropped
	r.dropped = 0
	return n, true
}
