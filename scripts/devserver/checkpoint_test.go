package main

import (
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// A checkpoint over the node protocol's WebSocket: the order is pushed to
// the node, which asks for its upload and says it is done on its
// connection; the sealed checkpoint restores into a second environment.
func TestCheckpointOverTheNodeProtocol(t *testing.T) {
	base := startDevserver(t)
	c := api{t: t, base: base, token: apitest.BobToken}
	var leased envAnswer
	if s := c.do("POST", "/v1/environments", map[string]any{"template": "shell"}, &leased); s != 201 {
		t.Fatalf("lease: %d", s)
	}
	orig := c.waitState(leased.Environment.ID, domain.StateReady, time.Minute)

	var ans environments.CheckpointAnswer
	if s := c.do("POST", "/v1/environments/"+orig.ID+"/checkpoints?wait=20s", map[string]any{"name": "shell.tar.zst"}, &ans); s != 200 && s != 202 {
		t.Fatalf("checkpoint: %d", s)
	}
	for deadline := time.Now().Add(2 * time.Minute); !ans.Checkpoint.Done(); {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint still %s", ans.Checkpoint.State)
		}
		c.do("GET", "/v1/environments/"+orig.ID+"/checkpoints/"+ans.Checkpoint.ID+"?wait=20s", nil, &ans)
	}
	if ans.Checkpoint.State != domain.CheckpointSealed || ans.Artifact == nil || ans.Artifact.Name != "shell.tar.zst" {
		t.Fatalf("checkpoint %+v", ans.Checkpoint)
	}
	if s := c.do("POST", "/v1/environments", map[string]any{"template": "shell", "snapshot": ans.Artifact.ID}, &leased); s != 201 {
		t.Fatalf("lease from the checkpoint: %d", s)
	}
	cp := c.waitState(leased.Environment.ID, domain.StateReady, time.Minute)
	if cp.Restored == nil || cp.Restored.Key != ans.Artifact.ID {
		t.Fatalf("restored %+v", cp.Restored)
	}
	for _, id := range []string{orig.ID, cp.ID} {
		if s := c.do("DELETE", "/v1/environments/"+id, nil, nil); s != 200 {
			t.Fatalf("delete: %d", s)
		}
	}
}
