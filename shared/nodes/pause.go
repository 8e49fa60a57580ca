package nodes

import (
	"context"
	"errors"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Pausing on the node protocol (docs/environments.md, "Pause on idle, wake
// on use"). The timeout job asked for a checkpoint marked Pause of an idle
// environment; when its node says it is done, the environment becomes
// paused (its checkpoint sealed) or is stopped (it failed, or the template's
// quota of paused environments is full). A paused environment's node is
// told to tear it down as a stopping one (envState), and its report of
// stopped lets the environment go from the node (nodeLetGo).

// PauseStore is what pausing needs of the store (store.Store).
type PauseStore interface {
	PauseEnvironment(ctx context.Context, e domain.Environment, art string, retention time.Duration, now time.Time) (domain.Environment, bool, error)
}

// finishPause pauses environment id after its pause checkpoint c ended,
// if it is still ready and still idle: a touch since the job asked (its
// idle deadline moved) keeps it running, the checkpoint an ordinary one.
//
// stop says the environment now leaves its node (paused, or stopped as
// idle): the node that reported the checkpoint's end is answered so, and
// tears it down at once, even where the service cannot push to it.
func (s *Service) finishPause(ctx context.Context, org, id string, c domain.Checkpoint) (stop bool, err error) {
	ps, ok := s.store.(PauseStore)
	if !ok {
		return false, nil
	}
	for try := 0; try < attempts; try++ {
		e, err := s.store.GetEnvironment(ctx, org, id)
		if err != nil {
			return false, err
		}
		now := s.clock.Now()
		if e.State != domain.StateReady || e.Checkpoint == nil || e.Checkpoint.ID != c.ID || now.Before(e.IdleUntil) {
			return false, nil // touched, stopped or changed: nothing to pause
		}
		if c.State != domain.CheckpointSealed {
			return s.stopIdle(ctx, e, now)
		}
		retention := e.Retention.Std()
		if retention <= 0 {
			retention = domain.DefaultRetention.Std()
		}
		paused, done, err := ps.PauseEnvironment(ctx, e, c.Artifact, retention, now)
		if errors.Is(err, domain.ErrPausedQuotaFull) {
			// The checkpoint stays an artifact of the organization
			// (envlease resume ART leases from it).
			return s.stopIdle(ctx, e, now)
		}
		if err != nil {
			return false, err
		}
		if done {
			// The node tears it down now, as after a delete; the stop
			// notice the pause wrote resends it if this is lost.
			s.tell(ctx, paused)
			return paused.Node != "", nil
		}
	}
	return false, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry", id)
}

// stopIdle stops e as an idle environment of a template that stops.
func (s *Service) stopIdle(ctx context.Context, e domain.Environment, now time.Time) (bool, error) {
	to := domain.StateStopped
	if e.Node != "" {
		to = domain.StateStopping
	}
	stopped, done, err := s.store.StopEnvironment(ctx, e, to, domain.StopIdle, now)
	if err == nil && done {
		s.tell(ctx, stopped)
	}
	return err == nil && done && to == domain.StateStopping, err
}

// tell pushes a pause or a stop to the environment's node when the
// service has a Teller; it never fails what is already committed.
func (s *Service) tell(ctx context.Context, e domain.Environment) {
	if s.opt.Teller != nil {
		s.opt.Teller.Stop(ctx, e)
	}
}

// nodeLetGo records that a paused environment's node tore it down: it
// stays paused, without a node, and may wake on any node of its pool.
func (s *Service) nodeLetGo(ctx context.Context, e domain.Environment) (domain.Environment, error) {
	for try := 0; try < attempts; try++ {
		if e.State != domain.StatePaused || e.Node == "" {
			return e, nil
		}
		after := e
		after.Node = ""
		cur, done, err := s.store.ReplaceEnvironment(ctx, e, after)
		if err != nil || done {
			return cur, err
		}
		e = cur
	}
	return e, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry the report", e.ID)
}
