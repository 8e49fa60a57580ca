package store

import (
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// dueWrites counts, inside this process, the writes of this store (and of
// its WithClient copies) that put an offer or a stop notice, per shard:
// the records the re-offer and stop jobs walk. A job loop that is the only
// reader of a table all of whose writers share this store (the local
// stack) reads only the shards whose count moved since its last read, or
// where what it read falls due (see nodes.Offerer.SkipIdle). Where writers
// are other processes (a Lambda per request) the counts say nothing, and
// the jobs read every shard on every tick.
type dueWrites struct {
	mu sync.Mutex
	n  map[string]uint64 // by partition key
}

func newDueWrites() *dueWrites { return &dueWrites{n: map[string]uint64{}} }

func (d *dueWrites) get(pk string) uint64 {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[pk]
}

// OfferWrites returns how many offers of one shard this process's store has
// put (or tried to) so far; it only grows. Read it before reading the
// shard: a put the read did not see moves it after.
func (s *Store) OfferWrites(shard int) uint64 { return s.due.get(offerPK(shard)) }

// StopWrites is OfferWrites for the stop notices of one shard.
func (s *Store) StopWrites(shard int) uint64 { return s.due.get(stopPK(shard)) }

// dueWritten counts one put of an offer or stop notice under pk, made or
// tried: a call that timed out may have written.
func (s *Store) dueWritten(pk string) {
	if s.due == nil {
		return
	}
	s.due.mu.Lock()
	s.due.n[pk]++
	s.due.mu.Unlock()
}

// dueCommitted counts the offers and stop notices a transaction put (or
// tried to).
func (s *Store) dueCommitted(items []types.TransactWriteItem) {
	for _, it := range items {
		if it.Put == nil {
			continue
		}
		if pk, _ := it.Put.Item[AttrPK].(*types.AttributeValueMemberS); pk != nil && isDuePK(pk.Value) {
			s.dueWritten(pk.Value)
		}
	}
}

func isDuePK(pk string) bool {
	return strings.HasPrefix(pk, "OFFER#") || strings.HasPrefix(pk, "STOP#")
}
