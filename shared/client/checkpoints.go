package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// CheckpointRequest is the optional body of POST
// /v1/environments/{id}/checkpoints.
type CheckpointRequest struct {
	// Name is the artifact's name (default checkpoint-<environment>.tar.zst).
	Name string `json:"name,omitempty"`
	// Expires is the artifact's expiry: a duration ("72h") or an RFC 3339
	// time (default the artifacts' default, 7 days).
	Expires string `json:"expires,omitempty"`
}

// CheckpointAnswer is a checkpoint and, once sealed, its artifact.
type CheckpointAnswer struct {
	Checkpoint domain.Checkpoint `json:"checkpoint"`
	Artifact   *domain.Artifact  `json:"artifact,omitempty"`
}

// MaxCheckpointWait is the longest wait one request may ask for.
const MaxCheckpointWait = 20 * time.Second

// Checkpoint asks for a checkpoint of a ready environment, waiting up to
// wait (at most MaxCheckpointWait) for it to end. It is never sent again
// after a 502 or 503: it may have been taken.
func (c *Client) Checkpoint(ctx context.Context, env string, r CheckpointRequest, wait time.Duration) (CheckpointAnswer, error) {
	var out CheckpointAnswer
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(env) + "/checkpoints", query: waitQuery(wait), body: r}, &out)
	return out, err
}

// GetCheckpoint reads a checkpoint of an environment, waiting up to wait
// (at most MaxCheckpointWait) for it to end: a long poll.
func (c *Client) GetCheckpoint(ctx context.Context, env, id string, wait time.Duration) (CheckpointAnswer, error) {
	var out CheckpointAnswer
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(env) + "/checkpoints/" + seg(id), query: waitQuery(wait), retry: true}, &out)
	return out, err
}

// CheckpointEnvironment asks for a checkpoint and waits, request after
// long-polled request, until it is sealed (its artifact returned) or ctx
// ends. A failed checkpoint is an error with the node's reason.
func (c *Client) CheckpointEnvironment(ctx context.Context, env string, r CheckpointRequest) (CheckpointAnswer, error) {
	ans, err := c.Checkpoint(ctx, env, r, MaxCheckpointWait)
	for err == nil && !ans.Checkpoint.Done() {
		ans, err = c.GetCheckpoint(ctx, env, ans.Checkpoint.ID, MaxCheckpointWait)
	}
	if err != nil {
		return ans, err
	}
	if ans.Checkpoint.State == domain.CheckpointFailed {
		return ans, fmt.Errorf("checkpoint %s of %s failed: %s", ans.Checkpoint.ID, env, ans.Checkpoint.Error)
	}
	return ans, nil
}

func waitQuery(wait time.Duration) url.Values {
	if wait <= 0 {
		return nil
	}
	return url.Values{"wait": {min(wait, MaxCheckpointWait).String()}}
}
