package agent

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/agent/netstack"
	"github.com/envlease/envlease/shared/nodes"
)

// refusalEvery is how often at most an environment's refusals become an
// event (environment.network.refused): a program that retries a refused
// address without pause costs the service one write every few seconds.
const refusalEvery = 5 * time.Second

// refusalBatch gathers an environment's refusals between two events.
type refusalBatch struct {
	a  *Agent
	id string // under mu

	mu      sync.Mutex
	pending nodes.NetRefusals
	timer   *time.Timer
	closed  bool
}

// add takes one refused connection or DNS question; the first of a batch
// sends it refusalEvery later.
func (rb *refusalBatch) add(r netstack.Record) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.closed {
		return
	}
	rb.pending.Count += 1 + int(r.Suppressed)
	if len(rb.pending.Refusals) < nodes.MaxRefusalsShown {
		rb.pending.Refusals = append(rb.pending.Refusals, nodes.NetRefusal{Time: r.Time, Proto: r.Proto, Addr: r.Addr, Port: r.Port, Name: r.Name, Rule: r.Rule})
	}
	if rb.timer == nil {
		rb.timer = time.AfterFunc(refusalEvery, rb.flush)
	}
}

// rename makes the batch a warm environment's lease's.
func (rb *refusalBatch) rename(id string) {
	rb.mu.Lock()
	rb.id = id
	rb.mu.Unlock()
}

// flush sends what was gathered.
func (rb *refusalBatch) flush() {
	rb.mu.Lock()
	batch, id := rb.pending, rb.id
	rb.pending, rb.timer = nodes.NetRefusals{}, nil
	rb.mu.Unlock()
	if batch.Count == 0 {
		return
	}
	node := rb.a.Node()
	if node == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if strings.HasPrefix(id, "warm-") {
		return // a warm environment's, before any lease: no one to tell
	}
	path := "/v1/nodes/" + url.PathEscape(node) + "/environments/" + url.PathEscape(id) + "/network-refused"
	if _, err := rb.a.api.do(ctx, http.MethodPost, path, batch, nil); err != nil {
		rb.a.log.Warn("refused connections not reported", "environment", id, "count", batch.Count, "err", err)
	}
}

// close sends what is left, once the environment's boundary closed.
func (rb *refusalBatch) close() {
	rb.mu.Lock()
	rb.closed = true
	t := rb.timer
	rb.mu.Unlock()
	if t != nil && t.Stop() {
		rb.flush()
	}
}
