package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// The checkpoint part of the node protocol (docs/nodes.md, "Checkpoints").
// The service pushes a checkpoint order; the node packs the environment's
// files, asks for an upload (checkpointUpload: the service creates the
// organization's artifact and presigns its upload), uploads, and says it
// is done (checkpointDone: the service seals the artifact). A node without
// a connection learns the order from its heartbeat's answer (EnvState).
const (
	MsgCheckpoint          = "checkpoint"          // service -> node, unasked
	MsgCheckpointUpload    = "checkpointUpload"    // -> checkpointUploading
	MsgCheckpointUploading = "checkpointUploading" //
	MsgCheckpointDone      = "checkpointDone"      // -> checkpointed
	MsgCheckpointed        = "checkpointed"        //
)

// CheckpointOrder tells a node to checkpoint an environment it runs.
type CheckpointOrder struct {
	ID string `json:"id"`
	// PartSize is the part size of the artifact's upload: a file larger
	// than it goes up in parts, each declared by its SHA-256.
	PartSize int64 `json:"partSize"`
}

// CheckpointPacked is what a node says of a checkpoint it packed: with
// checkpointUpload the archive's size and digests; with checkpointDone
// Error (empty: the upload is done, seal it).
type CheckpointPacked struct {
	// PartSize is the part size Parts were declared for.
	PartSize int64    `json:"partSize,omitempty"`
	Size     int64    `json:"size"`
	SHA256   string   `json:"sha256"`
	Parts    []string `json:"parts,omitempty"`
	Files    int      `json:"files"`
	Bytes    int64    `json:"bytes"`
	Error    string   `json:"error,omitempty"`
}

// Fit is what the node sends: its error cut as Report.Fit cuts one.
func (p CheckpointPacked) Fit() CheckpointPacked {
	p.Error = CleanError(p.Error)
	return p
}

// CheckpointUploading is the answer to checkpointUpload.
type CheckpointUploading struct {
	Artifact domain.Artifact `json:"artifact"`
	Upload   domain.Upload   `json:"upload"`
	// PartSize, set alone, says the parts were declared for another part
	// size than the service's: declare them again for this one.
	PartSize int64 `json:"partSize,omitempty"`
}

// CheckpointArtifacts is what the service needs of artifacts to keep a
// checkpoint (artifacts.Service): the Linker the service is made with
// provides it where checkpoints can be taken.
type CheckpointArtifacts interface {
	Create(ctx context.Context, p domain.Principal, req artifacts.CreateRequest) (artifacts.Created, error)
	Upload(ctx context.Context, p domain.Principal, id string) (artifacts.Created, error)
	Complete(ctx context.Context, p domain.Principal, id string, parts []artifacts.CompletedPart) (domain.Artifact, error)
	Get(ctx context.Context, p domain.Principal, id string) (domain.Artifact, error)
	PartSize() int64
}

func (s *Service) checkpointArtifacts() (CheckpointArtifacts, error) {
	if arts, ok := s.links.(CheckpointArtifacts); ok {
		return arts, nil
	}
	return nil, domain.Errorf(domain.CodeUnavailable, "checkpoints cannot be stored here")
}

// envState is what a heartbeat tells a node of e: with a checkpoint that is
// packing, its order, so a node that missed the push (or has no connection)
// learns it.
func (s *Service) envState(e domain.Environment) EnvState {
	st := EnvState{ID: e.ID, Template: e.Template, State: e.State, Error: e.Error}
	if e.State == domain.StatePaused {
		// To its node a paused environment is one to tear down and report
		// stopped (pause.go): agents need no new state.
		st.State = domain.StateStopping
	}
	if c := e.Checkpoint; c != nil && c.State == domain.CheckpointPacking && e.State == domain.StateReady {
		st.Checkpoint = &CheckpointOrder{ID: c.ID, PartSize: s.partSize()}
	}
	if e.State.Live() {
		st.Network = e.Network
	}
	for _, pv := range e.Previews {
		if pv.Revoked != nil {
			st.RevokedPreviews = append(st.RevokedPreviews, pv.ID)
		}
	}
	return st
}

func (s *Service) partSize() int64 {
	if arts, ok := s.links.(CheckpointArtifacts); ok {
		return arts.PartSize()
	}
	return artifacts.DefaultPartSize
}

// CheckpointOrderOf is the order of e's checkpoint that is packing, nil if none.
func CheckpointOrderOf(e domain.Environment, partSize int64) *CheckpointOrder {
	if c := e.Checkpoint; c != nil && c.State == domain.CheckpointPacking && e.State == domain.StateReady {
		return &CheckpointOrder{ID: c.ID, PartSize: partSize}
	}
	return nil
}

// checkpointOf reads the environment a node reports a checkpoint of: its
// node's (404 otherwise), with that checkpoint.
func (s *Service) checkpointOf(ctx context.Context, p domain.Principal, nodeID, envID, id string) (domain.Environment, error) {
	if _, err := s.activeNode(ctx, p, nodeID); err != nil {
		return domain.Environment{}, err
	}
	e, err := s.store.GetEnvironment(ctx, p.OrgID, envID)
	if err != nil {
		return domain.Environment{}, err
	}
	if e.Node != nodeID || e.Checkpoint == nil || e.Checkpoint.ID != id {
		return domain.Environment{}, domain.NotFound("checkpoint")
	}
	return e, nil
}

// ownerOf acts as who asked for the checkpoint: the artifact is theirs.
func ownerOf(e domain.Environment) domain.Principal {
	p := domain.Principal{OrgID: e.OrgID, Role: domain.RoleMember}
	if by := e.Checkpoint.CreatedBy; by != "" {
		p.UserID = by
	} else {
		p.UserID = e.CreatedBy
	}
	return p
}

// CheckpointUpload creates the artifact of a checkpoint the node packed
// and presigns its upload. Asked again (the answer was lost), it presigns
// the same artifact's upload again.
func (s *Service) CheckpointUpload(ctx context.Context, p domain.Principal, nodeID, envID, id string, r CheckpointPacked) (CheckpointUploading, error) {
	arts, err := s.checkpointArtifacts()
	if err != nil {
		return CheckpointUploading{}, err
	}
	e, err := s.checkpointOf(ctx, p, nodeID, envID, id)
	if err != nil {
		return CheckpointUploading{}, err
	}
	if e.Checkpoint.State != domain.CheckpointPacking {
		return CheckpointUploading{}, domain.Errorf(domain.CodeConflict, "checkpoint %s is %s", id, e.Checkpoint.State)
	}
	owner := ownerOf(e)
	if e.Checkpoint.Artifact != "" {
		up, err := arts.Upload(ctx, owner, e.Checkpoint.Artifact)
		if err != nil {
			return CheckpointUploading{}, err
		}
		return CheckpointUploading{Artifact: up.Artifact, Upload: up.Upload}, nil
	}
	if ps := arts.PartSize(); r.PartSize != ps && (r.Size > ps || len(r.Parts) > 0) {
		return CheckpointUploading{PartSize: ps}, nil
	}
	size := r.Size
	created, err := arts.Create(ctx, owner, artifacts.CreateRequest{
		Name: e.Checkpoint.Name, Project: e.Project, ContentType: domain.CheckpointContentType,
		Labels: map[string]string{domain.LabelCheckpointOf: e.ID, domain.LabelCheckpointTemplate: e.Template},
		Size:   &size, SHA256: r.SHA256, Parts: r.Parts, Expires: e.Checkpoint.Expires,
	})
	if err != nil {
		return CheckpointUploading{}, err
	}
	_, err = s.updateCheckpoint(ctx, e, id, func(c *domain.Checkpoint) {
		c.Artifact, c.Files, c.Bytes, c.Size = created.Artifact.ID, r.Files, r.Bytes, r.Size
	})
	if err != nil {
		return CheckpointUploading{}, err
	}
	return CheckpointUploading{Artifact: created.Artifact, Upload: created.Upload}, nil
}

// CheckpointDone ends a checkpoint: failed with the node's error, or sealed
// once its artifact's bytes verify. Repeating it is harmless.
func (s *Service) CheckpointDone(ctx context.Context, p domain.Principal, nodeID, envID, id string, r CheckpointPacked) (CheckpointEnd, error) {
	e, err := s.checkpointOf(ctx, p, nodeID, envID, id)
	if err != nil {
		return CheckpointEnd{}, err
	}
	if e.Checkpoint.Done() {
		return CheckpointEnd{Checkpoint: *e.Checkpoint}, nil
	}
	if r.Error == "" && e.Checkpoint.Artifact == "" {
		return CheckpointEnd{}, domain.Errorf(domain.CodeConflict, "checkpoint %s has no artifact yet; ask for its upload first", id)
	}
	state, why := domain.CheckpointFailed, CleanError(r.Error)
	if r.Error == "" {
		arts, err := s.checkpointArtifacts()
		if err != nil {
			return CheckpointEnd{}, err
		}
		_, err = arts.Complete(ctx, ownerOf(e), e.Checkpoint.Artifact, nil)
		switch {
		case err == nil:
			state = domain.CheckpointSealed
		case domain.ErrorCode(err) == domain.CodeConflict:
			// Sealed by an earlier call whose answer was lost?
			a, gerr := arts.Get(ctx, ownerOf(e), e.Checkpoint.Artifact)
			if gerr != nil || a.State != domain.ArtifactSealed {
				return CheckpointEnd{}, err
			}
			state = domain.CheckpointSealed
		case domain.ErrorCode(err) == domain.CodeInvalid:
			why = "the upload did not verify: " + err.Error()
		default:
			return CheckpointEnd{}, err
		}
	}
	now := s.clock.Now()
	c, err := s.updateCheckpoint(ctx, e, id, func(c *domain.Checkpoint) {
		c.State, c.Error = state, why
		if state == domain.CheckpointSealed {
			c.Sealed = &now
		}
	})
	if err == nil && c.Pause {
		// The idle environment's files are kept (or could not be): pause
		// it, or stop it as its template's stop would (pause.go).
		var stop bool
		stop, err = s.finishPause(ctx, e.OrgID, e.ID, c)
		return CheckpointEnd{Checkpoint: c, Stop: stop}, err
	}
	return CheckpointEnd{Checkpoint: c}, err
}

// CheckpointEnd is the answer to a node's word that a checkpoint ended:
// the checkpoint, and Stop when its environment now leaves the node (a
// pause, or an idle stop in its place), so the node tears it down at once
// rather than at its next heartbeat (an HTTP node, which the service cannot
// push to) or the stop job's resend.
type CheckpointEnd struct {
	Checkpoint domain.Checkpoint `json:"checkpoint"`
	Stop       bool              `json:"stop,omitempty"`
}

// updateCheckpoint changes the environment's checkpoint id in place, in a
// versioned write, read again when another write came first.
func (s *Service) updateCheckpoint(ctx context.Context, e domain.Environment, id string, change func(*domain.Checkpoint)) (domain.Checkpoint, error) {
	for try := 0; try < attempts; try++ {
		if e.Checkpoint == nil || e.Checkpoint.ID != id {
			return domain.Checkpoint{}, domain.NotFound("checkpoint")
		}
		after := e
		c := *e.Checkpoint
		change(&c)
		after.Checkpoint = &c
		cur, done, err := s.store.ReplaceEnvironment(ctx, e, after)
		if err != nil {
			return domain.Checkpoint{}, err
		}
		if done {
			return c, nil
		}
		e = cur
	}
	return domain.Checkpoint{}, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry", e.ID)
}

// TellCheckpoint pushes e's checkpoint order to its node's connection. A
// node without one learns it from its heartbeat: nothing to warn about.
//
// The order carries no part size: the node declares its parts for the
// default one, and CheckpointUpload says when another is in use.
func (s *Stopper) TellCheckpoint(ctx context.Context, e domain.Environment) {
	order := CheckpointOrderOf(e, 0)
	if order == nil || e.Node == "" {
		return
	}
	conn, err := s.store.NodeConnection(ctx, e.OrgID, e.Node, s.clock.Now())
	if err != nil || conn == "" {
		return
	}
	msg, err := json.Marshal(Message{Type: MsgCheckpoint, Node: e.Node, Environment: e.ID, Checkpoint: order})
	if err != nil {
		return
	}
	if err := s.poster.Post(ctx, ConnectionID(conn), msg); err != nil && !errors.Is(err, ErrGone) {
		s.log.WarnContext(ctx, "checkpoint order not sent", "environment", e.ID, "node", e.Node, "err", err.Error())
	}
}

// checkpointRoutes are the node's checkpoint endpoints, the HTTP side of
// checkpointUpload and checkpointDone.
func checkpointRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/checkpoints/{checkpoint}/upload", Access: httpapi.Node, Handler: s.handleCheckpointUpload},
		{Method: http.MethodPost, Path: "/v1/nodes/{id}/environments/{env}/checkpoints/{checkpoint}/done", Access: httpapi.Node, Handler: s.handleCheckpointDone},
	}
}

func (s *Service) handleCheckpointUpload(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req CheckpointPacked
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.CheckpointUpload(r.Context(), p, r.PathValue("id"), r.PathValue("env"), r.PathValue("checkpoint"), req)
	if err != nil {
		return err
	}
	// The upload URLs are credentials for a while.
	httpapi.WriteSecret(w, http.StatusOK, out)
	return nil
}

func (s *Service) handleCheckpointDone(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req CheckpointPacked
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	c, err := s.CheckpointDone(r.Context(), p, r.PathValue("id"), r.PathValue("env"), r.PathValue("checkpoint"), req)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
	return nil
}

// socketCheckpoint answers checkpointUpload and checkpointDone on the
// node protocol.
func (k *Socket) socketCheckpoint(ctx context.Context, p domain.Principal, m Message) (*Message, error) {
	if m.Checkpoint == nil || m.Packed == nil {
		return nil, domain.Invalid("checkpoint", "checkpoint and packed are required")
	}
	if m.Type == MsgCheckpointUpload {
		out, err := k.svc.CheckpointUpload(ctx, p, m.Node, m.Environment, m.Checkpoint.ID, *m.Packed)
		if err != nil {
			return nil, err
		}
		return &Message{Type: MsgCheckpointUploading, Node: m.Node, Environment: m.Environment, Uploading: &out}, nil
	}
	c, err := k.svc.CheckpointDone(ctx, p, m.Node, m.Environment, m.Checkpoint.ID, *m.Packed)
	if err != nil {
		return nil, err
	}
	ans := &Message{Type: MsgCheckpointed, Node: m.Node, Environment: m.Environment, Checkpointed: &c.Checkpoint}
	if c.Stop {
		ans.Environments = []string{m.Environment} // it leaves the node: tear it down
	}
	return ans, nil
}
