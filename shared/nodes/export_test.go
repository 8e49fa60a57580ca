package nodes

import (
	"context"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// FinishPause is what a node's report that pause checkpoint c ended does
// to environment id, without the artifact's upload.
func (s *Service) FinishPause(ctx context.Context, org, id string, c domain.Checkpoint) error {
	_, err := s.finishPause(ctx, org, id, c)
	return err
}

// ReofferOnTicks runs ReofferLoop's passes on the ticks given, until they
// are closed, so a test decides when a tick comes.
func (o *Offerer) ReofferOnTicks(ctx context.Context, ticks <-chan time.Time) {
	o.reofferTicks(ctx, ticks, 0, time.Time{})
}

// ResendOnTicks is ReofferOnTicks for the stop job.
func (s *Stopper) ResendOnTicks(ctx context.Context, ticks <-chan time.Time) {
	s.resendTicks(ctx, ticks, 0, time.Time{})
}
