package environments

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// MaxWait bounds how long one GET /v1/environments/{id}?wait=… is held: the
// wait runs inside one request, so it stays under the API functions' 10 s
// timeout; a client that wants to wait longer asks again.
const MaxWait = 8 * time.Second

// What a wait waits for (the query parameter wait).
const (
	// WaitReady answers once the environment is ready or can no longer
	// become ready (failed, stopping, stopped).
	WaitReady = "ready"
	// WaitChange answers once its state is not the query's state (by
	// default, the state the wait began in).
	WaitChange = "change"
)

// Re-reads of a wait that has no change signal, or whose signal may miss a
// write made by another process: soon at first, as a warm environment is
// ready within a tenth of a second, then less often. With a signal the
// fallback re-read is rare.
const (
	rereadFirst     = 25 * time.Millisecond
	rereadMax       = 500 * time.Millisecond
	rereadSignalled = 2 * time.Second
)

// Watcher tells of environment changes committed by this process (the
// store's WatchEnvironment). It is given where every writer shares the
// process (the local stack); a Lambda has none, as its writers are other
// functions' invocations.
type Watcher interface {
	WatchEnvironment(org, id string) (<-chan struct{}, func())
}

// WithChanges makes waits re-read the environment as soon as w says it
// changed, instead of on a timer.
func WithChanges(w Watcher) Option { return func(s *Service) { s.changes = w } }

// WaitQuery is what GET /v1/environments/{id} was asked to wait for; the
// zero value asks for no wait.
type WaitQuery struct {
	For     string
	State   domain.State
	Timeout time.Duration
}

// parseWait reads wait, state and timeout from a read's query. Without
// wait, state and timeout are refused rather than ignored.
func parseWait(r *http.Request) (WaitQuery, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return WaitQuery{}, domain.BadRequest("query", "the query string is not valid URL encoding")
	}
	w := WaitQuery{For: q.Get("wait"), State: domain.State(q.Get("state")), Timeout: MaxWait}
	switch w.For {
	case "":
		if q.Has("state") || q.Has("timeout") {
			return WaitQuery{}, domain.BadRequest("wait", "state and timeout go with wait=ready or wait=change")
		}
		return w, nil
	case WaitReady:
		if q.Has("state") {
			return WaitQuery{}, domain.BadRequest("state", "state goes with wait=change")
		}
	case WaitChange:
		if q.Has("state") && !w.State.Valid() {
			return WaitQuery{}, domain.BadRequest("state", "state must be one of pending, starting, ready, stopping, stopped, failed")
		}
	default:
		return WaitQuery{}, domain.BadRequest("wait", "wait must be ready or change")
	}
	if v := q.Get("timeout"); q.Has("timeout") {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxWait {
			return WaitQuery{}, domain.BadRequest("timeout", "timeout must be a duration such as 5s, above 0 and at most %s", MaxWait)
		}
		w.Timeout = d
	}
	return w, nil
}

// done says whether e is what the wait waits for.
func (w WaitQuery) done(e domain.Environment) bool {
	switch w.For {
	case WaitReady:
		return e.State == domain.StateReady || !e.State.Live()
	case WaitChange:
		return e.State != w.State
	}
	return true
}

// Wait reads the environment and, while it is not what w waits for, reads
// it again on each change signal (and on a timer, see rereadFirst) until it
// is or w.Timeout passed; it then answers the environment as it is. A wait
// is one request: it holds nothing beyond it, so it works the same in a
// Lambda, where only the timer re-reads.
func (s *Service) Wait(ctx context.Context, p domain.Principal, id string, w WaitQuery) (domain.Environment, error) {
	if w.For == "" {
		return s.Get(ctx, p, id)
	}
	var changed <-chan struct{}
	if s.changes != nil && validID(id) {
		// Watch before the first read, so a change between the read and the
		// wait still wakes it.
		ch, stop := s.changes.WatchEnvironment(p.OrgID, id)
		defer stop()
		changed = ch
	}
	e, err := s.Get(ctx, p, id)
	if err != nil {
		return e, err
	}
	if w.For == WaitChange && w.State == "" {
		w.State = e.State
	}
	deadline := time.NewTimer(w.Timeout)
	defer deadline.Stop()
	every := rereadFirst
	if changed != nil {
		every = rereadSignalled
	}
	reread := time.NewTimer(every)
	defer reread.Stop()
	for !w.done(e) {
		select {
		case <-ctx.Done():
			return e, nil // the client went away: nobody reads the answer
		case <-deadline.C:
			return e, nil
		case <-changed:
		case <-reread.C:
			if changed == nil {
				every = min(2*every, rereadMax)
			}
		}
		next, err := s.Get(ctx, p, id)
		if err != nil {
			if ctx.Err() != nil {
				return e, nil
			}
			return next, err
		}
		e = next
		if !reread.Stop() {
			select {
			case <-reread.C:
			default:
			}
		}
		reread.Reset(every)
	}
	return e, nil
}
