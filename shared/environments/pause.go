package environments

import (
	"context"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Wake on use (docs/environments.md, "Pause on idle, wake on use"). A
// paused environment holds no node; a touch, an exec, a tunnel or a preview
// link asked of it, or POST /v1/environments/{id}/wake, wakes it: pending
// again in its pool with its checkpoint as its snapshot, restored and
// verified on whichever node claims it, its template's command started as a
// fresh start would. A request that needs it ready (exec, tunnel, preview)
// waits for it within itself up to MaxWait, under the API functions'
// timeout and API Gateway's 29 s; if it is not ready by then the answer is
// 503 waking with Retry-After, and the client asks again (the Go client and
// the CLI do, up to a minute).

// WakeRetryAfter is the Retry-After of a 503 waking.
const WakeRetryAfter = 2 * time.Second

// pauseStore is what waking and ending paused environments need of the
// store (store.Store).
type pauseStore interface {
	ResumeEnvironment(ctx context.Context, e domain.Environment, now time.Time) (domain.Environment, bool, error)
	EndPausedEnvironment(ctx context.Context, e domain.Environment, reason string, now time.Time) (domain.Environment, bool, error)
	ExpireArtifact(ctx context.Context, org, id string, now time.Time) error
}

// nodeLister lists the organization's nodes, to say when none can wake an
// environment (store.Store).
type nodeLister interface {
	ListNodes(ctx context.Context, org string) ([]domain.Node, error)
}

func wakeRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/environments/{id}/wake", Access: httpapi.Member, Handler: s.handleWake},
	}
}

// Wake wakes a paused environment and answers it (pending); any other
// environment is answered as it is. 503 waking while its node still tears
// it down; 429 quota when the template's running quota is full.
func (s *Service) Wake(ctx context.Context, p domain.Principal, id string) (domain.Environment, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil {
		return e, err
	}
	return s.wake(ctx, e)
}

func (s *Service) wake(ctx context.Context, e domain.Environment) (domain.Environment, error) {
	ps, ok := s.store.(pauseStore)
	if !ok {
		return e, nil
	}
	for try := 0; e.State == domain.StatePaused; try++ {
		// Past its retention or its hard end it is the timeout job's to
		// delete: a wake would take a running slot and a node for an
		// environment that is over.
		if due := e.Due(); !s.clock.Now().Before(due) {
			return e, domain.Errorf(domain.CodeGone, "environment %s stayed paused past %s (its retention or its hard timeout) and is being deleted with its checkpoint; lease a new one",
				e.ID, due.Format(time.RFC3339))
		}
		if e.Node != "" {
			return e, wakingError(e, "its node is still letting it go")
		}
		if try == 5 {
			return e, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry", e.ID)
		}
		cur, done, err := ps.ResumeEnvironment(ctx, e, s.clock.Now())
		if err != nil {
			return e, err
		}
		if done {
			if s.offerer != nil {
				octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offerTimeout)
				s.offerer.Offer(octx, cur)
				cancel()
			}
			return cur, nil
		}
		e = cur
	}
	return e, nil
}

// getWoken is getActing for a request that needs the environment ready
// (exec, tunnel, preview): a paused one is woken, and one waking is waited
// for up to MaxWait; past it the answer is 503 waking (or no_node when no
// active node of its pool can run it).
func (s *Service) getWoken(ctx context.Context, p domain.Principal, id string) (domain.Environment, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil || !waking(e) {
		return e, err
	}
	if e, err = s.wake(ctx, e); err != nil {
		return e, err
	}
	e, err = s.Wait(ctx, p, id, WaitQuery{For: WaitReady, Timeout: MaxWait})
	if err != nil || !waking(e) {
		return e, err
	}
	if none, err := s.noNodeFor(ctx, e); err != nil || none != nil {
		if err == nil {
			err = none
		}
		return e, err
	}
	return e, wakingError(e, "it is "+string(e.State))
}

// waking says whether e is paused, or woke and is not ready yet.
func waking(e domain.Environment) bool {
	return e.State == domain.StatePaused ||
		e.Resumed != nil && (e.State == domain.StatePending || e.State == domain.StateStarting)
}

func wakingError(e domain.Environment, why string) error {
	return &domain.Error{Code: domain.CodeWaking, RetryAfter: WakeRetryAfter, Message: "environment " + e.ID +
		" was paused and is waking (" + why + "); its files come back from its checkpoint and its command starts again: ask again"}
}

// noNodeFor is the 503 no_node of a pending environment that no active
// node of its pool can run; nil when one can (or nodes cannot be listed).
func (s *Service) noNodeFor(ctx context.Context, e domain.Environment) (error, error) {
	nl, ok := s.store.(nodeLister)
	if !ok || e.State != domain.StatePending {
		return nil, nil
	}
	ns, err := nl.ListNodes(ctx, e.OrgID)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if n.State == domain.NodeActive && n.Pool == e.Pool && n.Runs(e.Needs) {
			return nil, nil
		}
	}
	return &domain.Error{Code: domain.CodeNoNode, RetryAfter: WakeRetryAfter, Message: "environment " + e.ID +
		" is waking but no active node of pool " + e.Pool + " can run it; it stays pending and starts when one can"}, nil
}

// endPaused deletes a paused environment: stopped with reason deleted, its
// checkpoint's artifact expired.
func (s *Service) endPaused(ctx context.Context, e domain.Environment) (domain.Environment, error) {
	ps, ok := s.store.(pauseStore)
	if !ok {
		return e, nil
	}
	for try := 0; e.State == domain.StatePaused; try++ {
		if try == 5 {
			return e, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast to delete; retry", e.ID)
		}
		now := s.clock.Now()
		cur, done, err := ps.EndPausedEnvironment(ctx, e, domain.StopDeleted, now)
		if err != nil {
			return e, err
		}
		if done && e.Snapshot != "" {
			_ = ps.ExpireArtifact(ctx, e.OrgID, e.Snapshot, now) // else it expires on its own
		}
		if done && cur.State == domain.StateStopping && s.stopper != nil {
			// Its node had not let it go yet: told at once, as a delete of
			// a running one is (the stop job re-sends it if lost).
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offerTimeout)
			s.stopper.Stop(sctx, cur)
			cancel()
		}
		e = cur
	}
	return e, nil
}

func (s *Service) handleWake(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var none struct{}
	if err := httpapi.DecodeOptional(r, &none); err != nil {
		return err
	}
	e, err := s.Wake(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, e)
	return nil
}
