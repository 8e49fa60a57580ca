package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// transactConflictRetries bounds how often a transaction cancelled only by
// TransactionConflict (another transaction held one of its items, which real
// DynamoDB reports instead of queueing) is sent again. The SDK does not retry
// those itself, and under a burst of leases on one quota item they are normal.
const transactConflictRetries = 6

// transact runs one TransactWriteItems. It returns the cancellation reasons
// when a condition failed (err nil, reasons non-nil), so callers can say which
// item refused; every other failure is a dependency error.
func (s *Store) transact(ctx context.Context, op string, items []types.TransactWriteItem) ([]types.CancellationReason, error) {
	backoff := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		// Counted whatever the answer: a call that timed out may have committed.
		s.dueCommitted(items)
		if err == nil {
			s.changes.committed(items)
			return nil, nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return nil, dependencyError(op, err)
		}
		conflict, failed := false, false
		for _, r := range tce.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed":
				failed = true
			case "TransactionConflict":
				conflict = true
			}
		}
		if failed {
			return tce.CancellationReasons, nil
		}
		if !conflict || attempt >= transactConflictRetries {
			return nil, dependencyError(op, err)
		}
		select {
		case <-ctx.Done():
			return nil, dependencyError(op, fmt.Errorf("%w: %v", ctx.Err(), err))
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// conditionFailed reports whether reason i of a cancelled transaction is a failed condition.
func conditionFailed(reasons []types.CancellationReason, i int) bool {
	return i >= 0 && i < len(reasons) && aws.ToString(reasons[i].Code) == "ConditionalCheckFailed"
}
