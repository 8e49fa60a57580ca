package faults_test

import (
	"bytes"
	"net/http"

	"github.com/envlease/envlease/shared/apitest"
)

// keepLogEndpoint is a node asking for the artifact that keeps an
// environment's log. A retry after a fault makes another artifact and links
// it instead: the first is left to its expiry.
func keepLogEndpoint() endpoint {
	var env string
	return endpoint{
		name: "POST /v1/nodes/{id}/environments/{env}/log", status: 201,
		prepare: func(s *stack) request {
			var node string
			node, env = s.claimed()
			return request{method: http.MethodPost, path: "/v1/nodes/" + node + "/environments/" + env + "/log", token: s.nodeToken,
				body: map[string]any{"size": 3, "sha256": digest([]byte("abc"))}}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}

// completeLogEndpoint seals a kept log whose bytes were uploaded. A fault
// after the seal's write leaves it sealed, so the retry is 409.
func completeLogEndpoint() endpoint {
	var env string
	return endpoint{
		name: "POST /v1/nodes/{id}/environments/{env}/log/complete", status: 200,
		prepare: func(s *stack) request {
			var node string
			node, env = s.claimed()
			data := []byte("abc")
			path := "/v1/nodes/" + node + "/environments/" + env + "/log"
			out := s.must(http.MethodPost, path, s.nodeToken, map[string]any{"size": len(data), "sha256": digest(data)}, 201)
			part := out["upload"].(map[string]any)["parts"].([]any)[0].(map[string]any)
			req, _ := http.NewRequest(http.MethodPut, part["url"].(string), bytes.NewReader(data))
			for k, v := range part["headers"].(map[string]any) {
				req.Header.Set(k, v.(string))
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				s.T.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				s.T.Fatalf("upload: %d", res.StatusCode)
			}
			return request{method: http.MethodPost, path: path + "/complete", token: s.nodeToken}
		},
		retried: func(s *stack, res *apitest.Response) {
			if res.Status != 200 && res.Status != 409 {
				s.T.Fatalf("complete after the fault cleared: %d %s", res.Status, res.Body)
			}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}

// logsEndpoint asks where a running environment's log is, on a node that
// serves an endpoint; it reads and writes nothing else.
func logsEndpoint() endpoint {
	var env string
	return endpoint{
		name: "GET /v1/environments/{id}/logs", status: 200,
		prepare: func(s *stack) request {
			env = s.leaseOnNode("ws://127.0.0.1:1/tunnel")
			return request{method: http.MethodGet, path: "/v1/environments/" + env + "/logs", token: apitest.BobToken}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}

// leaseOnNode leases a sleeper and has a node registered with tunnelURL
// claim it, so the environment runs there: what the routes that reach a
// node (logs, metrics) need.
func (s *stack) leaseOnNode(tunnelURL string) string {
	body := map[string]any{"tunnelURL": tunnelURL}
	for k, v := range registerBody {
		body[k] = v
	}
	node := s.must(http.MethodPost, "/v1/nodes", s.nodeToken, body, 201)["node"].(map[string]any)["id"].(string)
	env := s.leaseSleeper()
	if got := s.must(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=0s", s.nodeToken, nil, 200)["environment"].(map[string]any)["id"]; got != env {
		s.T.Fatalf("node %s claimed %v, want %s", node, got, env)
	}
	return env
}
