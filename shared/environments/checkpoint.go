package environments

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Checkpoints: POST /v1/environments/{id}/checkpoints asks the node that
// runs a ready environment to pack its files into a sealed artifact of the
// organization (docs/api.md, "Checkpoints"). The checkpoint is kept on the
// environment's record, one at a time; the node reports on it through the
// node protocol (nodes/checkpoint.go). A caller waits for it with `wait`
// (a long poll, at most MaxCheckpointWait per request), on the POST or on
// GET /v1/environments/{id}/checkpoints/{checkpoint}.

// MaxCheckpointWait bounds one request's wait: under the function's timeout
// and API Gateway's 30 s.
const MaxCheckpointWait = 20 * time.Second

// CheckpointTimeout is how long a checkpoint may stay packing: one its
// node never finished (it was lost, or runs an agent that does not take
// checkpoints) is failed past it, and another may be asked for. A node
// gives up on one after 30 minutes.
const CheckpointTimeout = time.Hour

// checkpointPoll is how often a waiting request reads the record again.
const checkpointPoll = 250 * time.Millisecond

// checkpointStore is what checkpoints need beyond Store: a versioned write
// of the environment (store.ReplaceEnvironment).
type checkpointStore interface {
	ReplaceEnvironment(ctx context.Context, before, after domain.Environment) (domain.Environment, bool, error)
}

// checkpointTeller pushes a checkpoint order to the node (nodes.Stopper).
type checkpointTeller interface {
	TellCheckpoint(ctx context.Context, e domain.Environment)
}

// CheckpointRequest is the (optional) body of the POST.
type CheckpointRequest struct {
	// Name is the artifact's name (default checkpoint-<environment>.tar.zst).
	Name string `json:"name,omitempty"`
	// Expires is the artifact's expiry: a duration from when it is sealed's
	// request, or an RFC 3339 time (default the artifacts' default).
	Expires string `json:"expires,omitempty"`
}

// CheckpointAnswer is the body of both endpoints: the checkpoint and, once
// sealed, its artifact.
type CheckpointAnswer struct {
	Checkpoint domain.Checkpoint `json:"checkpoint"`
	Artifact   *domain.Artifact  `json:"artifact,omitempty"`
}

func checkpointRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/environments/{id}/checkpoints", Access: httpapi.Member, Handler: s.handleCheckpoint},
		{Method: http.MethodGet, Path: "/v1/environments/{id}/checkpoints/{checkpoint}", Access: httpapi.Member, Handler: s.handleGetCheckpoint},
	}
}

// Checkpoint asks for a checkpoint of a ready environment: 409 when it is
// not ready or a checkpoint of it is already packing.
func (s *Service) Checkpoint(ctx context.Context, p domain.Principal, id string, req CheckpointRequest) (domain.Checkpoint, error) {
	cs, ok := s.store.(checkpointStore)
	if !ok {
		return domain.Checkpoint{}, domain.Errorf(domain.CodeUnavailable, "checkpoints are not available here")
	}
	name := req.Name
	if name == "" {
		name = "checkpoint-" + id + ".tar.zst"
	}
	if len(name) > 255 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return domain.Checkpoint{}, domain.Invalid("name", "name must be at most 255 characters without control characters")
	}
	now := s.clock.Now()
	if req.Expires != "" {
		if _, err := artifacts.ParseExpiry(req.Expires, now); err != nil {
			return domain.Checkpoint{}, err
		}
	}
	e, err := s.getActing(ctx, p, id)
	for try := 0; err == nil; try++ {
		if e.State != domain.StateReady {
			return domain.Checkpoint{}, domain.Errorf(domain.CodeConflict, "environment %s is %s; only a ready environment can be checkpointed", e.ID, e.State)
		}
		if c := e.Checkpoint; c != nil && !c.Done() && now.Sub(c.Requested) < CheckpointTimeout {
			return domain.Checkpoint{}, domain.Errorf(domain.CodeConflict, "checkpoint %s of environment %s is still %s; wait for it", c.ID, e.ID, c.State)
		}
		if try == 5 {
			return domain.Checkpoint{}, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry", e.ID)
		}
		c := domain.Checkpoint{
			ID: auth.NewID("ckp_"), Environment: e.ID, State: domain.CheckpointPacking, Name: name,
			Expires: req.Expires, Requested: now, CreatedBy: p.Actor(),
		}
		after := e
		after.Checkpoint = &c
		var done bool
		if e, done, err = cs.ReplaceEnvironment(ctx, e, after); err == nil && done {
			if t, ok := s.stopper.(checkpointTeller); ok {
				tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offerTimeout)
				t.TellCheckpoint(tctx, e)
				cancel()
			}
			return c, nil
		}
	}
	return domain.Checkpoint{}, err
}

// WaitCheckpoint reads checkpoint cid of environment id, waiting up to wait
// for it to end; with its artifact once sealed.
//
// The wait is the request's, in real time (a timer, not the service's
// clock): it bounds how long the caller is held.
func (s *Service) WaitCheckpoint(ctx context.Context, p domain.Principal, id, cid string, wait time.Duration) (CheckpointAnswer, error) {
	bound := time.NewTimer(wait)
	defer bound.Stop()
	waited := wait <= 0
	for {
		e, err := s.Get(ctx, p, id)
		if err != nil {
			return CheckpointAnswer{}, err
		}
		c := e.Checkpoint
		if c == nil || c.ID != cid {
			return CheckpointAnswer{}, domain.NotFound("checkpoint")
		}
		switch {
		case c.State == domain.CheckpointPacking && !e.State.Live():
			// The environment ended before its node finished.
			c.State, c.Error = domain.CheckpointFailed, "the environment ended ("+string(e.State)+") before its checkpoint was sealed"
		case c.State == domain.CheckpointPacking && s.clock.Now().Sub(c.Requested) >= CheckpointTimeout:
			c.State, c.Error = domain.CheckpointFailed, "its node did not finish it within "+CheckpointTimeout.String()
		}
		if c.Done() || waited {
			out := CheckpointAnswer{Checkpoint: *c}
			if c.State == domain.CheckpointSealed {
				a, err := s.store.GetArtifact(ctx, p.OrgID, c.Artifact)
				if err != nil {
					return CheckpointAnswer{}, err
				}
				out.Artifact = &a
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return CheckpointAnswer{}, ctx.Err()
		case <-bound.C:
			waited = true // read once more, then answer
		case <-time.After(checkpointPoll):
		}
	}
}

func checkpointWait(r *http.Request) (time.Duration, error) {
	for k := range r.URL.Query() {
		if k != "wait" {
			return 0, domain.BadRequest(k, "unknown query parameter %q; this takes wait", k)
		}
	}
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := domain.ParseDuration(v)
	if err != nil || d < 0 || d.Std() > MaxCheckpointWait {
		return 0, domain.BadRequest("wait", "wait must be a duration from 0s to %s", domain.Duration(MaxCheckpointWait))
	}
	return d.Std(), nil
}

// handleCheckpoint answers 202 with the checkpoint still packing, or 200
// once it ended within wait.
func (s *Service) handleCheckpoint(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	wait, err := checkpointWait(r)
	if err != nil {
		return err
	}
	var req CheckpointRequest
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	id := r.PathValue("id")
	c, err := s.Checkpoint(r.Context(), p, id, req)
	if err != nil {
		return err
	}
	out := CheckpointAnswer{Checkpoint: c}
	if wait > 0 {
		if out, err = s.WaitCheckpoint(r.Context(), p, id, c.ID, wait); err != nil {
			return err
		}
	}
	w.Header().Set("Location", "/v1/environments/"+id+"/checkpoints/"+c.ID)
	status := http.StatusAccepted
	if out.Checkpoint.Done() {
		status = http.StatusOK
	}
	httpapi.WriteJSON(w, status, out)
	return nil
}

func (s *Service) handleGetCheckpoint(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	wait, err := checkpointWait(r)
	if err != nil {
		return err
	}
	out, err := s.WaitCheckpoint(r.Context(), p, r.PathValue("id"), r.PathValue("checkpoint"), wait)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}
