package main

import (
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
)

// routes lists every endpoint group the local stack serves: the same groups the
// Lambdas serve one at a time.
func routes(d deps) [][]httpapi.Route {
	keySvc := keys.NewService(d.store, d.clock)
	return [][]httpapi.Route{
		keys.TokenRoutes(keySvc),
		keys.KeyRoutes(keySvc),
	}
}
