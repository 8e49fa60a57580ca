// Package metrics keeps per-request counters that the request log reports:
// today, how many DynamoDB calls a request made. The store counts into the
// request's context; the HTTP stack creates the counter and logs it.
package metrics

import (
	"context"
	"sync/atomic"
)

type key struct{}

// Request holds the counters of one request.
type Request struct {
	dynamoCalls atomic.Int64
}

// WithRequest returns a context carrying fresh counters.
func WithRequest(ctx context.Context) (context.Context, *Request) {
	r := &Request{}
	return context.WithValue(ctx, key{}, r), r
}

// AddDynamoCall counts one DynamoDB call against the request in ctx, if any.
func AddDynamoCall(ctx context.Context) {
	if r, ok := ctx.Value(key{}).(*Request); ok {
		r.dynamoCalls.Add(1)
	}
}

// DynamoCalls returns the number of DynamoDB calls counted so far.
func (r *Request) DynamoCalls() int64 { return r.dynamoCalls.Load() }
