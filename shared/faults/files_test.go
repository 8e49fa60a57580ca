package faults_test

import (
	"net/http"

	"github.com/envlease/envlease/shared/apitest"
)

// filesEndpoint asks for a write ticket for a ready environment's files:
// reads, and the environment.files event's one write. A fault before the
// write leaves no event and no ticket; one after it is a retried request's
// own event, since every write ticket is on record.
func filesEndpoint() endpoint {
	var env string
	return endpoint{
		name: "POST /v1/environments/{id}/files", status: 200,
		prepare: func(s *stack) request {
			body := map[string]any{"tunnelURL": "ws://127.0.0.1:1/tunnel"}
			for k, v := range registerBody {
				body[k] = v
			}
			node := s.must(http.MethodPost, "/v1/nodes", s.nodeToken, body, 201)["node"].(map[string]any)["id"].(string)
			env = s.must(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "shell"}, 201)["environment"].(map[string]any)["id"].(string)
			if got := s.must(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=0s", s.nodeToken, nil, 200)["environment"].(map[string]any)["id"]; got != env {
				s.T.Fatalf("node %s claimed %v, want %s", node, got, env)
			}
			s.must(http.MethodPost, "/v1/nodes/"+node+"/environments/"+env+"/report", s.nodeToken,
				map[string]any{"state": "ready", "exports": []map[string]any{{"service": "web", "target": "127.0.0.1:8080"}}}, 200)
			return request{method: http.MethodPost, path: "/v1/environments/" + env + "/files", token: apitest.BobToken,
				body: map[string]any{"write": true, "path": "/workspace"}}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}
