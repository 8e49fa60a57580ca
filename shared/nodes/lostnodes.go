package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/sweep"
)

// SweepResult says what one sweep did.
type SweepResult struct {
	Nodes        int `json:"nodes"`
	Environments int `json:"environments"`
	// Reindexed nodes were due in the index but had heartbeat since: their
	// entry was moved to their current deadline.
	Reindexed int `json:"reindexed"`
	// More is true when the time budget ended the sweep before every
	// partition was read; the next sweep goes on.
	More bool `json:"more"`
}

// SweepLostNodes declares lost every active node whose last heartbeat is
// older than LostAfter at now, and fails what it ran with error "node lost",
// releasing the quota once. It finds them through the NODEDUE partitions of
// the due index, worked in parallel, so its cost follows what is due; a node
// the index lists but which heartbeat since has its entry moved
// (store.ReindexNode). It stops taking new work sweep.DefaultMargin before
// ctx's deadline. It runs on its own schedule (functions/lostnodes, the
// devserver's loop).
func (s *Service) SweepLostNodes(ctx context.Context, now time.Time) (SweepResult, error) {
	var (
		mu   sync.Mutex
		res  SweepResult
		errs []error
	)
	budget := sweep.NewBudget(ctx, nil, 0)
	sweep.Each(ctx, s.store.NodeDuePartitions(), sweepShardWorkers, func(ctx context.Context, part string) {
		r, err := s.sweepPartition(ctx, part, now, budget)
		mu.Lock()
		defer mu.Unlock()
		res.Nodes += r.Nodes
		res.Environments += r.Environments
		res.Reindexed += r.Reindexed
		res.More = res.More || r.More
		if err != nil {
			errs = append(errs, fmt.Errorf("due partition %s: %w", part, err))
		}
	})
	return res, errors.Join(errs...)
}

func (s *Service) sweepPartition(ctx context.Context, part string, now time.Time, budget sweep.Budget) (SweepResult, error) {
	var res SweepResult
	for cursor := ""; ; {
		if budget.Spent() {
			res.More = true
			return res, nil
		}
		due, next, err := s.store.DueNodes(ctx, part, now, sweepPage, cursor)
		if err != nil {
			return res, err
		}
		for _, n := range due {
			if budget.Spent() {
				res.More = true
				return res, nil
			}
			if n.State != domain.NodeActive {
				continue // ended since the index was read
			}
			if now.Before(n.Deadline) {
				if err := s.store.ReindexNode(ctx, n); err != nil {
					return res, err
				}
				res.Reindexed++
				continue
			}
			failed, err := s.endNode(ctx, n, domain.NodeLost, ErrorNodeLost, StopLost)
			if err != nil {
				return res, err
			}
			res.Environments += failed
			res.Nodes++
		}
		if next == "" {
			return res, nil
		}
		cursor = next
	}
}

// LostNodeSweep is SweepLostNodes as a scheduled check: functions/lostnodes
// and the devserver's loop run it on their schedule. It logs what it did.
func (s *Service) LostNodeSweep(log *slog.Logger) func(ctx context.Context, now time.Time) error {
	return func(ctx context.Context, now time.Time) error {
		res, err := s.SweepLostNodes(ctx, now)
		if res.Nodes > 0 || res.More {
			log.InfoContext(ctx, "lost nodes", "nodes", res.Nodes, "environments", res.Environments, "reindexed", res.Reindexed, "more", res.More)
		}
		return err
	}
}
