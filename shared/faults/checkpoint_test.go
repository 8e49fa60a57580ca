package faults_test

import (
	"net/http"

	"github.com/envlease/envlease/shared/apitest"
)

// readyEnv is an environment a node runs and reported ready.
func (s *stack) readyEnv() (node, env string) {
	s.T.Helper()
	node, env = s.claimed()
	s.must(http.MethodPost, "/v1/nodes/"+node+"/environments/"+env+"/report", s.nodeToken, map[string]any{"state": "ready"}, 200)
	return node, env
}

// checkpointed is a ready environment with a checkpoint asked of it.
func (s *stack) checkpointed() (node, env, checkpoint string) {
	s.T.Helper()
	node, env = s.readyEnv()
	out := s.must(http.MethodPost, "/v1/environments/"+env+"/checkpoints", apitest.BobToken, nil, 202)
	return node, env, out["checkpoint"].(map[string]any)["id"].(string)
}

func deleteEnv(env string) func(*stack, *apitest.Response) {
	return func(s *stack, _ *apitest.Response) {
		s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
	}
}

// checkpointEndpoints are the fault runs of checkpoints: asking for one,
// reading it, and the node's upload and end of it.
func checkpointEndpoints() []endpoint {
	var env string
	return []endpoint{
		{name: "POST /v1/environments/{id}/checkpoints", status: 202, prepare: func(s *stack) request {
			_, env = s.readyEnv()
			return request{method: "POST", path: "/v1/environments/" + env + "/checkpoints", token: apitest.BobToken}
		}, cleanup: func(s *stack, res *apitest.Response) { deleteEnv(env)(s, res) },
			retried: func(s *stack, res *apitest.Response) {
				// The checkpoint may have been recorded before the fault:
				// then it is packing, and another is refused.
				if res.Status != 202 && res.Status != 409 {
					s.T.Fatalf("checkpoint after the fault cleared: %d %s", res.Status, res.Body)
				}
			}},
		{name: "GET /v1/environments/{id}/checkpoints/{checkpoint}", status: 200, prepare: func(s *stack) request {
			var id string
			_, env, id = s.checkpointed()
			return request{method: "GET", path: "/v1/environments/" + env + "/checkpoints/" + id, token: apitest.BobToken}
		}, cleanup: func(s *stack, res *apitest.Response) { deleteEnv(env)(s, res) }},
		{name: "POST /v1/nodes/{id}/environments/{env}/checkpoints/{checkpoint}/upload", status: 200, prepare: func(s *stack) request {
			node, e, id := s.checkpointed()
			env = e
			return request{method: "POST", path: "/v1/nodes/" + node + "/environments/" + env + "/checkpoints/" + id + "/upload", token: s.nodeToken,
				body: map[string]any{"size": 3, "sha256": digest([]byte("abc")), "files": 1, "bytes": 3}}
		}, cleanup: func(s *stack, res *apitest.Response) { deleteEnv(env)(s, res) }},
		{name: "POST /v1/nodes/{id}/environments/{env}/checkpoints/{checkpoint}/done", status: 200, prepare: func(s *stack) request {
			node, e, id := s.checkpointed()
			env = e
			return request{method: "POST", path: "/v1/nodes/" + node + "/environments/" + env + "/checkpoints/" + id + "/done", token: s.nodeToken,
				body: map[string]any{"error": "the node ran out of disk"}}
		}, cleanup: func(s *stack, res *apitest.Response) { deleteEnv(env)(s, res) }},
	}
}
