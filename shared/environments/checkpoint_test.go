package environments_test

import (
	"net/http"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// Asking for a checkpoint: 409 unless ready, 404 for another organization,
// one at a time (409) until it ends or its node misses CheckpointTimeout,
// after which it reads failed and another may be asked for.
func TestCheckpointRules(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.BobToken, map[string]any{"template": "shell"}).Environment["id"].(string)
	path := "/v1/environments/" + id + "/checkpoints"
	cases := []struct {
		name   string
		token  string
		before func()
		status int
	}{
		{"pending", apitest.BobToken, nil, 409},
		{"another organization's", apitest.CarolToken, func() { setState(t, e, id, domain.StateReady, "node_x") }, 404},
		{"ready", apitest.BobToken, nil, 202},
		{"while one packs", apitest.BobToken, nil, 409},
		{"after its node missed the timeout", apitest.BobToken, func() { e.Clock.Advance(environments.CheckpointTimeout) }, 202},
	}
	var first string
	for _, c := range cases {
		if c.before != nil {
			c.before()
		}
		r := e.Do(http.MethodPost, path, c.token, map[string]any{"name": "c.tar.zst"})
		if r.Status != c.status {
			t.Fatalf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.status)
		}
		if r.Status == 202 && first == "" {
			var ans environments.CheckpointAnswer
			r.JSON(t, &ans)
			first = ans.Checkpoint.ID
			if ans.Checkpoint.State != domain.CheckpointPacking || ans.Checkpoint.CreatedBy != "bob" || r.Header.Get("Location") != path+"/"+first {
				t.Fatalf("%s: %+v %v", c.name, ans.Checkpoint, r.Header)
			}
		}
	}
	// The first is no longer the environment's latest.
	if r := e.Do(http.MethodGet, path+"/"+first, apitest.BobToken, nil); r.Status != 404 {
		t.Fatalf("a replaced checkpoint: %d %s", r.Status, r.Body)
	}
	// A wait that ends before the checkpoint does answers it packing.
	var latest environments.CheckpointAnswer
	e.Do(http.MethodGet, "/v1/environments/"+id, apitest.BobToken, nil).JSON(t, &struct {
		Checkpoint *domain.Checkpoint `json:"checkpoint"`
	}{&latest.Checkpoint})
	r := e.Do(http.MethodGet, path+"/"+latest.Checkpoint.ID+"?wait=1s", apitest.BobToken, nil)
	r.JSON(t, &latest)
	if r.Status != 200 || latest.Checkpoint.State != domain.CheckpointPacking {
		t.Fatalf("waited: %d %+v", r.Status, latest.Checkpoint)
	}
	if r := e.Do(http.MethodGet, path+"/"+latest.Checkpoint.ID+"?wait=1h", apitest.BobToken, nil); r.Status != 400 {
		t.Fatalf("a wait past the bound: %d", r.Status)
	}
}
