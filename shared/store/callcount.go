package store

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// CallCounter counts DynamoDB operations by name. Benchmarks and tests attach
// it to a client to show what a request costs in round trips.
type CallCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewCallCounter returns an empty counter.
func NewCallCounter() *CallCounter { return &CallCounter{counts: map[string]int{}} }

// Option attaches the counter to a DynamoDB client:
// dynamodb.NewFromConfig(cfg, counter.Option) or client.Options().Copy.
func (c *CallCounter) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("envleaseCallCounter",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				c.mu.Lock()
				c.counts[middleware.GetOperationName(ctx)]++
				c.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
}

// Total returns the number of calls counted.
func (c *CallCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// Counts returns a copy of the per-operation counts.
func (c *CallCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Reset zeroes the counter.
func (c *CallCounter) Reset() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.mu.Unlock()
}

// WithClient returns a store that shares s's table through another client,
// e.g. one with a CallCounter attached.
func (s *Store) WithClient(db *dynamodb.Client) *Store {
	return &Store{db: db, table: s.table, shards: s.shards}
}
