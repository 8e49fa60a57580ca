package httpapi

import "maps"

// routeMakers names every route by which a token makes something that acts
// after the request: a credential, or a standing grant that mints or
// receives later. Each one's service passes what it makes through
// auth.Inherit, the one rule that it never outlives or outranks its maker
// (docs/security.md). TestEveryMakerInherits holds every write route to
// this table or routeNotMakers, and drives each maker with scoped,
// restricted and expiring tokens.
var routeMakers = map[string]string{
	"POST /v1/tokens":                     "a CLI token",
	"POST /v1/keys":                       "an organization key",
	"POST /v1/console/codes":              "a console sign-in code",
	"POST /v1/issuers":                    "a trusted issuer",
	"POST /v1/nodes/credentials":          "a node credential",
	"POST /v1/webhooks":                   "a webhook",
	"POST /v1/artifacts/{id}/links":       "a download link",
	"POST /v1/environments/{id}/tunnel":   "a tunnel ticket",
	"POST /v1/environments/{id}/previews": "a preview link, a bearer URL that opens an export until it expires",
	"POST /v1/environments/{id}/files":    "a files ticket, which opens the environment's files until it expires",
}

// routeNotMakers are the other write routes a token may call, each with why
// what it makes does not act for its maker later.
var routeNotMakers = map[string]string{
	"POST /v1/environments":                              "an environment is checked against the token's restrictions when leased and holds none of its rights",
	"POST /v1/environments/{id}/touch":                   "extends an environment within its template's timeouts",
	"POST /v1/environments/{id}/wake":                    "wakes a paused environment within its template's quota and timeouts",
	"POST /v1/environments/{id}/checkpoints":             "a checkpoint is an artifact: data, read only through a token's own link",
	"POST /v1/environments/{id}/exec":                    "an exec session lives on the request's own connection",
	"POST /v1/sandboxes":                                 "a join key is redeemed only by a token of the organization",
	"POST /v1/sandboxes/join":                            "redeems a join key",
	"POST /v1/artifacts":                                 "its upload URLs write only the declared bytes of the token's own artifact, for the upload window",
	"POST /v1/artifacts/{id}/upload":                     "renews the upload URLs of the token's own artifact",
	"POST /v1/artifacts/{id}/complete":                   "seals an artifact",
	"PUT /v1/usage/settings":                             "an organization setting, which grants nothing",
	"PUT /v1/budgets/{id}":                               "a budget, which grants nothing",
	"POST /v1/webhooks/{id}/deliveries/{delivery}/retry": "queues a delivery again to an existing webhook",
	"PATCH /v1/environments/{id}/network":                "changes the network rules of an environment, which grant nothing to anyone",
	"PUT /v1/secrets/{name}":                             "a secret is a value the boundary adds for the templates an admin binds it to; it carries no right of its setter",
}

// MakerTable is a copy of routeMakers, for the docs and tests.
func MakerTable() map[string]string { return maps.Clone(routeMakers) }

// NotMakerTable is a copy of routeNotMakers, for the docs and tests.
func NotMakerTable() map[string]string { return maps.Clone(routeNotMakers) }
