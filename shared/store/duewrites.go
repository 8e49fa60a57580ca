package store

import (
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// dueWrites counts, inside this process, the writes of this store (and of
// its WithClient copies) that put an offer or a stop notice: the records
// the re-offer and stop jobs walk. A job loop that is the only reader of a
// table all of whose writers share this store (the local stack) skips its
// walk while the count has not moved and nothing it read is due (see
// nodes.Offerer.SkipIdle). Where writers are other processes (a Lambda per
// request) the count says nothing, and the jobs walk on every tick.
type dueWrites struct{ n atomic.Uint64 }

// DueWrites returns how many offers and stop notices this process's store
// has put so far; it only grows. Read it before a walk: a put the walk did
// not see moves it after.
func (s *Store) DueWrites() uint64 {
	if s.due == nil {
		return 0
	}
	return s.due.n.Load()
}

// dueWritten counts one put of an offer or stop notice, made or tried.
func (s *Store) dueWritten() {
	if s.due != nil {
		s.due.n.Add(1)
	}
}

// dueCommitted counts a transaction that put (or tried to) an offer or stop notice.
func (s *Store) dueCommitted(items []types.TransactWriteItem) {
	for _, it := range items {
		if it.Put == nil {
			continue
		}
		if pk, _ := it.Put.Item[AttrPK].(*types.AttributeValueMemberS); pk != nil && isDuePK(pk.Value) {
			s.dueWritten()
			return
		}
	}
}

func isDuePK(pk string) bool {
	return strings.HasPrefix(pk, "OFFER#") || strings.HasPrefix(pk, "STOP#")
}
