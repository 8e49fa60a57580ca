package main

import (
	"sync"
	"time"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/console"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/federation"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/identity"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/openapi"
	"github.com/envlease/envlease/shared/sandboxes"
	"github.com/envlease/envlease/shared/secrets"
	"github.com/envlease/envlease/shared/templates"
	"github.com/envlease/envlease/shared/usage"
	"github.com/envlease/envlease/shared/webhooks"
)

// artifactService is the artifacts service of the local stack. Links are
// signed with the gateway's own (static) credentials locally.
func artifactService(d deps) *artifacts.Service {
	return artifacts.NewService(d.store, blob.New(blob.Options{Client: d.s3, Bucket: d.bucket, Clock: d.clock}), d.clock, artifacts.Options{})
}

// routes lists every endpoint group the local stack serves: the same groups the
// Lambdas serve one at a time.
func routes(d deps) [][]httpapi.Route {
	artifactSvc := artifactService(d)
	nodeSvc := nodeService(d, artifactSvc)
	// Revoking a node credential ends its nodes and closes its node
	// protocol connections, as the keys function does in AWS (there through
	// the Management API).
	var closer nodes.Closer
	if d.sockets != nil {
		closer = d.sockets
	}
	keySvc := keys.NewService(d.store, d.clock, keys.WithConnectionCloser(nodes.NewRevocations(d.store, closer, nodeSvc, d.log)))
	templateSvc := templates.NewService(d.store)
	envSvc := environments.NewService(d.store, d.clock, environments.WithOfferer(d.offerer), environments.WithStopper(d.stopper), environments.WithLinks(artifactSvc), environments.WithChanges(d.store))
	return [][]httpapi.Route{
		keys.TokenRoutes(keySvc),
		keys.KeyRoutes(keySvc),
		artifacts.Routes(artifactSvc),
		templates.Routes(templateSvc),
		templates.QuotaRoutes(templateSvc),
		sandboxes.Routes(sandboxes.NewService(d.store, d.clock)),
		environments.Routes(envSvc),
		identity.Routes(identityService(d, nodeSvc, envSvc)),
		openapi.Routes(),
		usage.Routes(usage.NewService(d.store, d.clock)),
		budgets.Routes(budgets.NewService(d.store, d.clock)),
		nodes.Routes(nodeSvc),
		console.Routes(console.Options{S3Origin: devstack.Origin(d.s3Endpoint)}),
		events.Routes(events.NewService(d.store, d.clock)),
		webhooks.Routes(webhooks.NewService(d.store, d.clock, webhooks.Guard{AllowLocal: d.allowLocalHooks})),
		federation.Routes(federationService(d)),
		secrets.Routes(secretService(d)),
	}
}

// identityService is the environments' OIDC issuer: its keys are kept in
// the table (a restarted dev server on the same data signs with the same
// key), its URL is -issuer or the server's own.
func identityService(d deps, nodeSvc *nodes.Service, envSvc *environments.Service) *identity.Service {
	url := d.issuer
	if url == "" {
		url = d.baseURL
	}
	return identity.NewService(identity.NewIssuer(url, identity.NewLocal(d.store, d.clock), d.clock), nodeSvc, envSvc).WithLogger(d.log)
}

// devSecretKeys seals secrets' data keys locally: a key the dev server
// makes at start and holds in memory, as long as its table lives (KMS in
// AWS; docs/secrets.md).
var devSecretKeys = sync.OnceValue(func() secrets.DataKeys { return secrets.NewRandomLocalKeys() })

// secretService is the organization secrets over the dev server's key.
func secretService(d deps) *secrets.Service {
	return secrets.NewService(d.store, devSecretKeys(), d.clock, d.log)
}

// federationService is the CI token exchange; issuers' documents are
// fetched through the webhook guard, which reaches loopback only with
// -oidc-allow-local.
func federationService(d deps) *federation.Service {
	guard := webhooks.Guard{AllowLocal: d.allowLocalIssuers}
	return federation.NewService(d.store, d.clock, guard, federation.NewVerifiers(guard.Client(10*time.Second, nil), d.clock), d.log)
}
