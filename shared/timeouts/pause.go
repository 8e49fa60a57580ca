package timeouts

import (
	"context"
	"fmt"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Pausing (docs/environments.md, "Pause on idle, wake on use"). An idle
// environment whose template's idle action is pause is not stopped: the job
// asks its node for a checkpoint marked Pause, and the node protocol's
// checkpointDone makes it paused once the checkpoint is sealed
// (nodes.Service.CheckpointDone). A paused environment is in the due index
// until its retention or its hard expiry, and this job deletes it then.

// ReasonRetention: a paused environment was kept its template's retention.
const ReasonRetention = domain.StopRetention

// PauseTimeout is how long a pause checkpoint may stay packing: past it,
// the job stops the environment as the template's stop would (its node was
// lost, or its agent takes no checkpoints).
const PauseTimeout = 30 * time.Minute

// PauseStore is what pausing needs of the store beyond Store; a Store
// without it stops idle environments, whatever their template says.
type PauseStore interface {
	ReplaceEnvironment(ctx context.Context, before, after domain.Environment) (domain.Environment, bool, error)
	EndPausedEnvironment(ctx context.Context, e domain.Environment, reason string, now time.Time) (domain.Environment, bool, error)
	ExpireArtifact(ctx context.Context, org, id string, now time.Time) error
	ListQuotas(ctx context.Context, org string) ([]domain.QuotaCount, error)
}

// checkpointTeller pushes a checkpoint order to its node (nodes.Stopper).
type checkpointTeller interface {
	TellCheckpoint(ctx context.Context, e domain.Environment)
}

// pause asks for e's pause checkpoint. ok false means e is to be stopped
// instead: the store cannot pause, the template's paused quota is full, or
// an earlier pause checkpoint never finished.
func pause(ctx context.Context, st Store, e domain.Environment, now time.Time) (outcome, error, bool) {
	ps, can := pauseStore(st)
	if !can {
		return 0, nil, false
	}
	if c := e.Checkpoint; c != nil && c.Pause && !c.Done() {
		if now.Sub(c.Requested) < PauseTimeout {
			return pausing, nil, true // its node is packing it
		}
		return 0, nil, false
	}
	if c := e.Checkpoint; c != nil && !c.Done() && now.Sub(c.Requested) < PauseTimeout {
		// A checkpoint someone asked for is packing: one at a time. The
		// next run asks again.
		return pausing, nil, true
	}
	full, err := pausedFull(ctx, ps, e)
	if err != nil {
		return failed, err, true
	}
	if full {
		return 0, nil, false
	}
	expires := e.Retention.Std()
	if expires <= 0 {
		expires = domain.DefaultRetention.Std()
	}
	c := domain.Checkpoint{
		ID: domain.SortableID("ckp_", now), Environment: e.ID, State: domain.CheckpointPacking,
		Name: "pause-" + e.ID + ".tar.zst", Requested: now, CreatedBy: e.CreatedBy, Pause: true,
		// The artifact outlives the retention, so a wake on its last day
		// still finds it.
		Expires: fmt.Sprintf("%dh", int((expires+24*time.Hour)/time.Hour)),
	}
	after := e
	after.Checkpoint = &c
	cur, done, err := ps.ReplaceEnvironment(ctx, e, after)
	if err != nil {
		return failed, err, true
	}
	if !done {
		_ = cur // changed meanwhile: the next run decides again
		return notDue, nil, true
	}
	if t, ok := st.(interface{ teller() checkpointTeller }); ok && t.teller() != nil {
		t.teller().TellCheckpoint(ctx, cur)
	}
	return pausing, nil, true
}

// pausedFull says whether e's template has no room for another paused
// environment (one query of the organization's quotas, made only for an
// environment about to pause). The pause's own transaction checks again.
func pausedFull(ctx context.Context, ps PauseStore, e domain.Environment) (bool, error) {
	qs, err := ps.ListQuotas(ctx, e.OrgID)
	if err != nil {
		return false, err
	}
	for _, q := range qs {
		if q.Template == e.Template {
			return q.Paused >= q.MaxPaused, nil
		}
	}
	return true, nil
}

// endPaused deletes a paused environment whose retention or hard expiry
// passed, then expires its checkpoint's artifact.
func endPaused(ctx context.Context, st Store, e domain.Environment, now time.Time) (outcome, error) {
	ps, ok := pauseStore(st)
	if !ok {
		return notDue, nil
	}
	reason := ""
	switch {
	case !now.Before(e.Expires):
		reason = ReasonHard
	case e.RetainUntil != nil && !now.Before(*e.RetainUntil):
		reason = ReasonRetention
	default:
		if err := st.ReindexEnvironment(ctx, e); err != nil {
			return notDue, nil
		}
		return reindexed, nil
	}
	cur, done, err := ps.EndPausedEnvironment(ctx, e, reason, now)
	if err != nil {
		return failed, err
	}
	if !done {
		if cur.State == domain.StatePaused {
			return notDue, nil // woken and paused again, or its node left: the next run
		}
		return alreadyStopped, nil
	}
	if e.Snapshot != "" {
		// The record says it ended; a failure here leaves the artifact to
		// its own expiry, a day after the retention.
		_ = ps.ExpireArtifact(ctx, e.OrgID, e.Snapshot, now)
	}
	return ended, nil
}

func pauseStore(st Store) (PauseStore, bool) {
	if t, ok := st.(telling); ok {
		st = t.Store
	}
	ps, ok := st.(PauseStore)
	return ps, ok
}
