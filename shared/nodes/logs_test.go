package nodes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
)

// presignOnly presigns uploads and nothing else: enough to create the
// artifact that keeps a log.
type presignOnly struct{ artifacts.Blobs }

func (presignOnly) PresignPut(_ context.Context, key, sha, ct string, ttl time.Duration) (blob.Presigned, error) {
	return blob.Presigned{Method: "PUT", URL: "https://s3.example/" + key, Headers: map[string]string{}, Expires: apitest.Start.Add(ttl)}, nil
}

// A node keeps the log of an environment it runs as an artifact of the
// environment's organization, linked from the environment at once; it
// cannot for an environment of another node, nor one larger than a log.
func TestNodeKeepsALog(t *testing.T) {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		arts := artifacts.NewService(e.Store, presignOnly{}, e.Clock, artifacts.Options{})
		svc := nodes.NewService(e.Store, arts, e.Clock, nodes.Options{PollMin: 5 * time.Millisecond, PollMax: 20 * time.Millisecond})
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, e.Clock))}
	})
	n := &env{Env: e}
	tok := n.credential(t, apitest.AliceToken, "local")
	node := n.register(t, tok, 4)
	id := n.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	if c, _ := n.claim(t, tok, node, "1s"); c == nil || c.Environment.ID != id {
		t.Fatalf("claim: %+v", c)
	}
	other := n.credential(t, apitest.AliceToken, "local")
	otherNode := n.register(t, other, 4)

	size := int64(11)
	sum := strings.Repeat("ab", 32)
	cases := []struct {
		name, token, node, env string
		body                   any
		status                 int
	}{
		{"no size", tok, node, id, map[string]any{"sha256": sum}, 422},
		{"larger than a log", tok, node, id, map[string]any{"size": nodes.MaxLogSize + 1, "sha256": sum}, 422},
		{"not a sha256", tok, node, id, map[string]any{"size": size, "sha256": "x"}, 422},
		{"another node's environment", other, otherNode, id, map[string]any{"size": size, "sha256": sum}, 409},
		{"no such environment", tok, node, "env_nosuch", map[string]any{"size": size, "sha256": sum}, 404},
		{"a member", apitest.BobToken, node, id, map[string]any{"size": size, "sha256": sum}, 403},
	}
	for _, c := range cases {
		if r := e.Do("POST", "/v1/nodes/"+c.node+"/environments/"+c.env+"/log", c.token, c.body); r.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.status)
		}
	}
	r := e.Do("POST", "/v1/nodes/"+node+"/environments/"+id+"/log", tok, map[string]any{"size": size, "sha256": sum})
	if r.Status != 201 {
		t.Fatalf("keep: %d %s", r.Status, r.Body)
	}
	var c artifacts.Created
	r.JSON(t, &c)
	if c.Artifact.State != domain.ArtifactOpen || c.Artifact.Labels["environment"] != id || len(c.Upload.Parts) != 1 {
		t.Fatalf("kept: %s", r.Body)
	}
	if got := n.get(t, apitest.BobToken, id); got.Log != c.Artifact.ID {
		t.Fatalf("the environment links %q, want %q", got.Log, c.Artifact.ID)
	}
	// Its bytes never arrived: the environment's log is not readable yet.
	if r := e.Do("GET", "/v1/environments/"+id+"/logs", apitest.CarolToken, nil); r.Status != 404 {
		t.Fatalf("another organization: %d", r.Status)
	}
}
