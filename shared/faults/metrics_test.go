package faults_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/envlease/envlease/shared/apitest"
)

// metricsEndpoint asks where a running environment's metrics are, on a node that
// serves an endpoint; it reads and writes nothing else.
func metricsEndpoint() endpoint {
	var env string
	return endpoint{
		name: "GET /v1/environments/{id}/metrics", status: 200,
		prepare: func(s *stack) request {
			env = s.leaseOnNode("ws://127.0.0.1:1/tunnel")
			return request{method: http.MethodGet, path: "/v1/environments/" + env + "/metrics", token: apitest.BobToken}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}

// recentMetricsEndpoint relays a running environment's recent samples from
// its node's endpoint (here a stand-in that answers one sample).
func recentMetricsEndpoint() endpoint {
	var env string
	return endpoint{
		name: "GET /v1/environments/{id}/metrics/recent", status: 200,
		prepare: func(s *stack) request {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				fmt.Fprintln(w, `{"time":"2026-03-14T09:00:05Z","cpu":1.5,"memory":1048576,"processes":1,"netIn":0,"netOut":0}`)
			}))
			s.T.Cleanup(srv.Close)
			env = s.leaseOnNode("ws://" + srv.Listener.Addr().String() + "/tunnel")
			return request{method: http.MethodGet, path: "/v1/environments/" + env + "/metrics/recent", token: apitest.BobToken}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}
