package environments

import (
	"context"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Offerer wakes a node of a new environment's pool (nodes.Offerer). It is
// called after the lease's transaction, and cannot fail the lease: an offer
// that is lost only delays the environment until the re-offer job or a
// node's own claim.
type Offerer interface {
	Offer(ctx context.Context, e domain.Environment)
}

// offerTimeout bounds what an offer may add to a lease's answer.
const offerTimeout = 5 * time.Second

// WithOfferer wakes a node of the pool after every lease.
func WithOfferer(o Offerer) Option { return func(s *Service) { s.offerer = o } }

// Stopper tells the node of an environment that is stopping to tear it down
// (nodes.Stopper). It is called after the stop's transaction, and cannot
// fail the stop: a message that is lost is sent again by the stop job.
type Stopper interface {
	Stop(ctx context.Context, e domain.Environment)
}

// WithStopper tells the node after every delete of an environment it runs.
func WithStopper(st Stopper) Option { return func(s *Service) { s.stopper = st } }
