package store

import (
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// changeSignal tells waiters in this process that an environment's state
// changed. Every state change of an environment is a transaction that
// carries the change's event (the outbox), so the signal is raised in one
// place, after such a transaction committed: a waiter woken by it reads the
// new state. It knows only the writes of this process: where the writers
// are other processes (a Lambda per request), waiters must re-read on a
// timer as well (see environments.WithChanges).
type changeSignal struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

func newChangeSignal() *changeSignal {
	return &changeSignal{waiters: map[string]map[chan struct{}]struct{}{}}
}

func changeKey(org, id string) string { return org + "#" + id }

// WatchEnvironment returns a channel that receives (at most one pending
// value) whenever a transaction of this store commits a state change of the
// environment, and the function that stops the watch. Watch before reading,
// so a change between the read and the wait is not missed.
func (s *Store) WatchEnvironment(org, id string) (<-chan struct{}, func()) {
	c := s.changes
	ch := make(chan struct{}, 1)
	if c == nil {
		return ch, func() {}
	}
	k := changeKey(org, id)
	c.mu.Lock()
	if c.waiters[k] == nil {
		c.waiters[k] = map[chan struct{}]struct{}{}
	}
	c.waiters[k][ch] = struct{}{}
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		delete(c.waiters[k], ch)
		if len(c.waiters[k]) == 0 {
			delete(c.waiters, k)
		}
		c.mu.Unlock()
	}
}

// committed signals the environments whose events items holds (an event
// item's subject is what the transaction changed).
func (c *changeSignal) committed(items []types.TransactWriteItem) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 {
		return
	}
	for _, it := range items {
		if it.Put == nil {
			continue
		}
		kind, _ := it.Put.Item["subjectKind"].(*types.AttributeValueMemberS)
		if kind == nil || kind.Value != "environment" {
			continue
		}
		org, _ := it.Put.Item["org"].(*types.AttributeValueMemberS)
		id, _ := it.Put.Item["subjectId"].(*types.AttributeValueMemberS)
		if org == nil || id == nil {
			continue
		}
		for ch := range c.waiters[changeKey(org.Value, id.Value)] {
			select {
			case ch <- struct{}{}:
			default: // one pending signal is enough: the waiter re-reads
			}
		}
	}
}
