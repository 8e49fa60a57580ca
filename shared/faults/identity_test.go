package faults_test

import (
	"net/http"

	"github.com/envlease/envlease/shared/apitest"
)

// identityEndpoints are the issuer's documents, the claims of a ready
// environment's identity and its node's fetch of the tokens (template
// idbox, which asks for an identity).
func identityEndpoints() []endpoint {
	var env string
	deleteEnv := func(s *stack, _ *apitest.Response) {
		s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
	}
	return []endpoint{
		{name: "GET /.well-known/openid-configuration", status: 200, prepare: func(*stack) request {
			return request{method: http.MethodGet, path: "/.well-known/openid-configuration"}
		}},
		{name: "GET /.well-known/jwks.json", status: 200, prepare: func(*stack) request {
			return request{method: http.MethodGet, path: "/.well-known/jwks.json"}
		}},
		{name: "GET /v1/environments/{id}/identity", status: 200, cleanup: deleteEnv, prepare: func(s *stack) request {
			_, env = s.readyOnEndpoint("idbox")
			return request{method: http.MethodGet, path: "/v1/environments/" + env + "/identity", token: apitest.BobToken}
		}},
		{name: "POST /v1/nodes/{id}/environments/{env}/identity", status: 200, cleanup: deleteEnv, prepare: func(s *stack) request {
			var node string
			node, env = s.readyOnEndpoint("idbox")
			return request{method: http.MethodPost, path: "/v1/nodes/" + node + "/environments/" + env + "/identity", token: s.nodeToken}
		}},
	}
}
