package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/envlease/envlease/shared/agent/checkpoint"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// checkpointOrdered takes the ordered checkpoint of an environment the node
// runs, once per checkpoint id however often it is ordered (a push and the
// heartbeat both carry it), in the background.
func (a *Agent) checkpointOrdered(ctx context.Context, node, envID string, o *nodes.CheckpointOrder) {
	if o == nil || o.ID == "" {
		return
	}
	r := a.env(envID)
	if r == nil {
		return
	}
	if _, taken := r.checkpoints.LoadOrStore(o.ID, true); taken {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, checkpoint.Timeout)
		defer cancel()
		log := a.log.With("environment", envID, "checkpoint", o.ID)
		packed, err := a.checkpoint(ctx, node, r, o, log)
		if err != nil {
			log.Warn("checkpoint failed", "err", err)
			packed = nodes.CheckpointPacked{Error: err.Error()}
		}
		ans, err := a.checkpointCall(ctx, nodes.MsgCheckpointDone, node, envID, o.ID, packed)
		if err != nil {
			log.Warn("checkpoint's end not recorded", "err", err)
			return
		}
		// A pause (or the idle stop in its place) takes the environment
		// off this node: the answer says so, so it goes now, whether or
		// not the service can push a stop to this node.
		if slices.Contains(ans.Environments, envID) {
			r.requestStop(true)
		}
	}()
}

// checkpoint takes the checkpoint (package checkpoint), through the node
// protocol's calls.
func (a *Agent) checkpoint(ctx context.Context, node string, r *runningEnv, o *nodes.CheckpointOrder, log *slog.Logger) (nodes.CheckpointPacked, error) {
	hp := r.h.Load()
	if hp == nil {
		return nodes.CheckpointPacked{}, errors.New("the environment is not running")
	}
	return checkpoint.Take{
		Handle:   *hp,
		Manifest: domain.CheckpointManifest{Environment: r.id, Template: r.env.Template, Runtime: r.env.Needs.Runtime},
		Order:    *o, TempDir: a.cfg.WorkDir, Room: a.noRoom, HTTP: a.http, Log: log,
		Call: func(ctx context.Context, typ string, p nodes.CheckpointPacked) (nodes.Message, error) {
			return a.checkpointCall(ctx, typ, node, r.id, o.ID, p)
		},
	}.Run(ctx)
}

// checkpointCall sends checkpointUpload or checkpointDone on the node
// protocol's connection when one is open, over HTTP otherwise; server and
// network errors are tried again a few times (both are repeatable).
func (a *Agent) checkpointCall(ctx context.Context, typ, node, env, id string, p nodes.CheckpointPacked) (nodes.Message, error) {
	p = p.Fit()
	var (
		ans nodes.Message
		err error
	)
	for try, backoff := 0, 100*time.Millisecond; try < 6; try, backoff = try+1, backoff*2 {
		if ans, err = a.checkpointSend(ctx, typ, node, env, id, p); err == nil {
			return ans, nil
		}
		if s := statusOf(err); s >= 400 && s < 500 || ctx.Err() != nil {
			return ans, err
		}
		select {
		case <-ctx.Done():
			return ans, err
		case <-time.After(backoff):
		}
	}
	return ans, err
}

func (a *Agent) checkpointSend(ctx context.Context, typ, node, env, id string, p nodes.CheckpointPacked) (nodes.Message, error) {
	if sock := a.sock.Load(); sock != nil {
		m, err := sock.call(ctx, nodes.Message{Type: typ, Node: node, Environment: env, Checkpoint: &nodes.CheckpointOrder{ID: id}, Packed: &p})
		if !errors.Is(err, errNoAnswer) {
			return m, err
		}
	}
	return a.api.checkpoint(ctx, typ, node, env, id, p)
}

// checkpoint is the HTTP side of checkpointUpload and checkpointDone,
// answered as the node protocol would.
func (c *Client) checkpoint(ctx context.Context, typ, node, env, id string, p nodes.CheckpointPacked) (nodes.Message, error) {
	base := "/v1/nodes/" + url.PathEscape(node) + "/environments/" + url.PathEscape(env) + "/checkpoints/" + url.PathEscape(id)
	if typ == nodes.MsgCheckpointUpload {
		var out nodes.CheckpointUploading
		_, err := c.do(ctx, http.MethodPost, base+"/upload", p, &out)
		return nodes.Message{Type: nodes.MsgCheckpointUploading, Uploading: &out}, err
	}
	var out nodes.CheckpointEnd
	_, err := c.do(ctx, http.MethodPost, base+"/done", p, &out)
	m := nodes.Message{Type: nodes.MsgCheckpointed, Checkpointed: &out.Checkpoint}
	if out.Stop {
		m.Environments = []string{env}
	}
	return m, err
}
