package devstack

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/envlease/envlease/shared/httpapi"
)

// WorkFirst serves at most n new leases (POST /v1/environments) at a time,
// in the order they came, and every other request at once.
//
// The local stack is one process: the API, the embedded DynamoDB and the
// node agent share the machine's few cores. When a crowd of leases comes at
// once, serving all of them together shares those cores among every
// lease's creation, then every claim, then every first command, so each
// lease advances at the pace of the slowest and they all end near the end.
// Admitting new leases a few at a time instead leaves the cores to what the
// leases already made need next (the node's claim, its ready report, the
// waits, the tickets and commands), so the first leases are ready while the
// last are still being made: the same work in the same total time, with
// half the crowd done by about half of it.
//
// In AWS every Lambda invocation has its own CPU, so the functions need no
// such order. A waiting request whose client went away is dropped unserved.
func WorkFirst(next http.Handler, n int) http.Handler {
	return newWorkFirst(next, n)
}

type workFirst struct {
	next http.Handler
	// slots: a channel's blocked senders are woken in the order they
	// blocked, so waiting leases are served in the order they came.
	slots chan struct{}
	// waiting counts the leases waiting for a slot (for tests).
	waiting atomic.Int32
}

func newWorkFirst(next http.Handler, n int) *workFirst {
	return &workFirst{next: next, slots: make(chan struct{}, max(n, 1))}
}

func (f *workFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/environments" {
		f.next.ServeHTTP(w, r)
		return
	}
	select {
	case f.slots <- struct{}{}:
	default:
		// The lease's body is read before it waits: Go's server notices a
		// client that hung up (and cancels the request's context) only
		// once the handler has read the body to its end, and a lease its
		// client gave up on must not be made later, against its quota.
		// A body over what any endpoint reads is left for the handler to
		// refuse.
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(io.LimitReader(r.Body, httpapi.MaxBodyBytes+1))
			if err != nil {
				return // the client is gone, or sent a broken body
			}
			rest := r.Body
			if len(b) <= httpapi.MaxBodyBytes {
				rest = http.NoBody
			}
			// The server closes the body it read from itself.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), rest))
		}
		f.waiting.Add(1)
		select {
		case f.slots <- struct{}{}:
			f.waiting.Add(-1)
		case <-r.Context().Done():
			f.waiting.Add(-1)
			return
		}
	}
	defer func() { <-f.slots }()
	f.next.ServeHTTP(w, r)
}
