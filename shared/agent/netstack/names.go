package netstack

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// maxNames bounds the addresses a boundary remembers names of; the oldest
// go first.
const maxNames = 8192

// nameKeep is how long an address is known by a name the environment
// resolved it from, past the answer's TTL: programs keep addresses they
// resolved long after, and a rule by name must go on holding for them.
const nameKeep = time.Hour

// names are the names each address was an answer for, in this
// environment's DNS.
type names struct {
	now   func() time.Time
	mu    sync.Mutex
	by    map[netip.Addr]map[string]time.Time // name -> until
	order []netip.Addr
}

func newNames(now func() time.Time) *names {
	return &names{now: now, by: map[netip.Addr]map[string]time.Time{}}
}

func (n *names) add(a netip.Addr, name string) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.by[a]
	if m == nil {
		if len(n.order) >= maxNames {
			delete(n.by, n.order[0])
			n.order = n.order[1:]
		}
		m = map[string]time.Time{}
		n.by[a] = m
		n.order = append(n.order, a)
	}
	m[name] = n.now().Add(nameKeep)
}

// of lists the names a is known by now.
func (n *names) of(a netip.Addr) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	var out []string
	for name, until := range n.by[a] {
		if now.Before(until) {
			out = append(out, name)
		}
	}
	return out
}
