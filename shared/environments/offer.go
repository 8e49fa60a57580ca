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
