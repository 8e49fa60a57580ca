// Package metrics keeps per-request counters that the request log reports:
// how many DynamoDB, S3 and API Gateway Management API calls a request made.
// The SDK clients count into the request's context (CountCalls, and the
// store's own middleware); the HTTP stack creates the counters and logs them.
package metrics

import (
	"context"
	"sync/atomic"

	"github.com/aws/smithy-go/middleware"
)

type key struct{}

// Request holds the counters of one request.
type Request struct {
	dynamoCalls atomic.Int64
	s3Calls     atomic.Int64
	socketCalls atomic.Int64
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

// S3Calls returns the number of S3 calls counted so far.
func (r *Request) S3Calls() int64 { return r.s3Calls.Load() }

// SocketCalls returns the number of API Gateway Management API calls
// (posts to and closes of node connections) counted so far.
func (r *Request) SocketCalls() int64 { return r.socketCalls.Load() }

// Services CountCalls counts.
const (
	S3     = "s3"
	Socket = "socket"
)

// CountCalls is an SDK client's API option that counts each call of the
// service (S3 or Socket) against the request in the call's context.
func CountCalls(service string) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("envleaseRequestCalls",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if r, ok := ctx.Value(key{}).(*Request); ok {
					switch service {
					case S3:
						r.s3Calls.Add(1)
					case Socket:
						r.socketCalls.Add(1)
					}
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	}
}
