package httpapi

import (
	"strings"

	"github.com/envlease/envlease/shared/domain"
)

// routeScopes is the one table from route to the scope a token needs for
// it (docs/security.md lists it). Node routes take node credentials, which
// have no scopes, and public routes no token: neither is here. "" is a
// route every token may use. A member or admin route missing from the
// table needs the admin scope, so a route added without an entry is closed
// to scoped tokens rather than open (TestEveryRouteHasAScope catches it).
var routeScopes = map[string]string{
	"GET /v1/whoami":          "",
	"GET /v1/issuers":         domain.ScopeAdmin,
	"POST /v1/issuers":        domain.ScopeAdmin,
	"DELETE /v1/issuers/{id}": domain.ScopeAdmin,

	"POST /v1/environments":                              domain.ScopeEnvLease,
	"DELETE /v1/environments/{id}":                       domain.ScopeEnvLease,
	"POST /v1/environments/{id}/touch":                   domain.ScopeEnvLease,
	"POST /v1/environments/{id}/wake":                    domain.ScopeEnvLease,
	"POST /v1/environments/{id}/tunnel":                  domain.ScopeEnvLease,
	"POST /v1/environments/{id}/checkpoints":             domain.ScopeEnvLease,
	"POST /v1/environments/{id}/previews":                domain.ScopeEnvLease,
	"DELETE /v1/environments/{id}/previews/{preview}":    domain.ScopeEnvLease,
	"GET /v1/environments/{id}/previews":                 domain.ScopeEnvLease,
	"POST /v1/sandboxes":                                 domain.ScopeEnvLease,
	"POST /v1/sandboxes/join":                            domain.ScopeEnvLease,
	"POST /v1/environments/{id}/exec":                    domain.ScopeEnvExec,
	"POST /v1/environments/{id}/files":                   domain.ScopeEnvExec,
	"GET /v1/environments":                               domain.ScopeEnvRead,
	"GET /v1/environments/{id}":                          domain.ScopeEnvRead,
	"GET /v1/environments/{id}/logs":                     domain.ScopeEnvRead,
	"GET /v1/environments/{id}/network-log":              domain.ScopeEnvRead,
	"GET /v1/environments/{id}/identity":                 domain.ScopeEnvRead,
	"GET /v1/environments/{id}/metrics":                  domain.ScopeEnvRead,
	"GET /v1/environments/{id}/metrics/recent":           domain.ScopeEnvRead,
	"PATCH /v1/environments/{id}/network":                domain.ScopeEnvNetwork,
	"GET /v1/environments/{id}/checkpoints/{checkpoint}": domain.ScopeEnvRead,
	"GET /v1/sandboxes":                                  domain.ScopeEnvRead,
	"GET /v1/sandboxes/{id}":                             domain.ScopeEnvRead,
	"GET /v1/templates":                                  domain.ScopeEnvRead,
	"GET /v1/quotas":                                     domain.ScopeEnvRead,
	"GET /v1/artifacts":                                  domain.ScopeArtifactsRead,
	"GET /v1/artifacts/{id}":                             domain.ScopeArtifactsRead,
	"POST /v1/artifacts/{id}/links":                      domain.ScopeArtifactsRead,
	"POST /v1/artifacts":                                 domain.ScopeArtifactsWrite,
	"POST /v1/artifacts/{id}/upload":                     domain.ScopeArtifactsWrite,
	"POST /v1/artifacts/{id}/complete":                   domain.ScopeArtifactsWrite,
	"GET /v1/usage":                                      domain.ScopeUsageRead,
	"GET /v1/usage/settings":                             domain.ScopeUsageRead,
	"GET /v1/budgets":                                    domain.ScopeUsageRead,
	"PUT /v1/usage/settings":                             domain.ScopeAdmin,
	"PUT /v1/budgets/{id}":                               domain.ScopeAdmin,
	"DELETE /v1/budgets/{id}":                            domain.ScopeAdmin,
	"GET /v1/events":                                     domain.ScopeEventsRead,
	"GET /v1/keys":                                       domain.ScopeTokensRead,
	"POST /v1/tokens":                                    domain.ScopeTokensWrite,
	"DELETE /v1/keys/{id}":                               domain.ScopeTokensWrite,
	"POST /v1/console/codes":                             domain.ScopeTokensWrite,
	"POST /v1/keys":                                      domain.ScopeAdmin,
	"GET /v1/nodes":                                      domain.ScopeAdmin,
	"POST /v1/nodes/credentials":                         domain.ScopeAdmin,
	"GET /v1/webhooks":                                   domain.ScopeAdmin,
	"POST /v1/webhooks":                                  domain.ScopeAdmin,
	"DELETE /v1/webhooks/{id}":                           domain.ScopeAdmin,
	"GET /v1/webhooks/{id}/deliveries":                   domain.ScopeAdmin,
	"POST /v1/webhooks/{id}/deliveries/{delivery}/retry": domain.ScopeAdmin,
	"GET /v1/secrets":                                    domain.ScopeSecretsRead,
	"GET /v1/secrets/{name}":                             domain.ScopeSecretsRead,
	"PUT /v1/secrets/{name}":                             domain.ScopeSecretsWrite,
	"DELETE /v1/secrets/{name}":                          domain.ScopeSecretsWrite,
}

// RouteScope returns the scope a token needs for the route and whether
// the table names the route.
func RouteScope(method, path string) (string, bool) {
	s, ok := routeScopes[method+" "+path]
	return s, ok
}

// ScopeTable is a copy of the table, for the docs and tests.
func ScopeTable() map[string]string {
	out := make(map[string]string, len(routeScopes))
	for k, v := range routeScopes {
		out[k] = v
	}
	return out
}

// checkScope refuses a request outside the token's scopes. It reads only
// the principal, which carries the scopes of the key record that
// authentication already read.
func checkScope(rt Route, p domain.Principal) error {
	if p.Scopes == nil || p.Credential == domain.CredentialNode {
		return nil
	}
	scope, ok := RouteScope(rt.Method, rt.Path)
	if !ok {
		scope = domain.ScopeAdmin
	}
	if !p.HasScope(scope) {
		return domain.MissingScope(scope)
	}
	return nil
}

// scopeChallenge is the WWW-Authenticate value of a 403 for a missing
// scope (RFC 6750 section 3.1).
func scopeChallenge(message string) string {
	const lead = "this token lacks the scope "
	if !strings.HasPrefix(message, lead) {
		return `Bearer error="insufficient_scope"`
	}
	scope, _, _ := strings.Cut(strings.TrimPrefix(message, lead), " ")
	return `Bearer error="insufficient_scope", scope="` + scope + `"`
}
