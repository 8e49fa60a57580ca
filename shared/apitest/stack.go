package apitest

import (
	"time"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/federation"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/identity"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/sandboxes"
	"github.com/envlease/envlease/shared/secrets"
	"github.com/envlease/envlease/shared/templates"
	"github.com/envlease/envlease/shared/usage"
	"github.com/envlease/envlease/shared/webhooks"
)

// AllRoutes is every endpoint group of the API over e's store and clock, with
// artifacts kept in blobs, as the deployed functions wire them.
func AllRoutes(e *Env, blobs *blob.Store) [][]httpapi.Route {
	artifactSvc := artifacts.NewService(e.Store, blobs, e.Clock, artifacts.Options{})
	secretSvc := NewSecrets(e)
	nodeSvc := nodes.NewService(e.Store, nil, e.Clock, nodes.Options{Secrets: secretSvc})
	// Revoking a node credential ends its nodes, as the keys function does
	// (there are no node protocol connections to close here).
	keySvc := keys.NewService(e.Store, e.Clock, keys.WithConnectionCloser(nodes.NewRevocations(e.Store, nil, nodeSvc, e.Log)))
	tplSvc := templates.NewService(e.Store)
	envSvc := environments.NewService(e.Store, e.Clock, environments.WithLinks(artifactSvc))
	return [][]httpapi.Route{
		keys.TokenRoutes(keySvc), keys.KeyRoutes(keySvc),
		sandboxes.Routes(sandboxes.NewService(e.Store, e.Clock)),
		environments.Routes(envSvc),
		identity.Routes(identity.NewService(identity.NewIssuer(IssuerURL, identity.NewLocal(e.Store, e.Clock), e.Clock), nodeSvc, envSvc)),
		templates.Routes(tplSvc), templates.QuotaRoutes(tplSvc),
		artifacts.Routes(artifactSvc),
		usage.Routes(usage.NewService(e.Store, e.Clock)),
		budgets.Routes(budgets.NewService(e.Store, e.Clock)),
		nodes.Routes(nodeSvc),
		events.Routes(events.NewService(e.Store, e.Clock)),
		webhooks.Routes(webhooks.NewService(e.Store, e.Clock, webhooks.Guard{})),
		federation.Routes(NewFederation(e)),
		secrets.Routes(secretSvc),
	}
}

// IssuerURL is the identity issuer of AllRoutes: a test that verifies
// tokens serves the issuer at its own URL instead.
const IssuerURL = "https://envlease.test"

// NewSecrets is the organization secrets over e's store and clock, sealed
// by e's local key (the same for every service of e).
func NewSecrets(e *Env) *secrets.Service {
	return secrets.NewService(e.Store, e.SecretKeys(), e.Clock, e.Log)
}

// NewFederation is the token exchange over e's store and clock, allowed to
// fetch from loopback issuers (a test's local issuer), as a local stack is.
func NewFederation(e *Env) *federation.Service {
	guard := webhooks.Guard{AllowLocal: true}
	return federation.NewService(e.Store, e.Clock, guard, federation.NewVerifiers(guard.Client(10*time.Second, nil), e.Clock), e.Log)
}

// testSecretKeys seals the secrets of every Env of the test binary, as the
// dev server's key does for its table.
var testSecretKeys = secrets.NewRandomLocalKeys()

// SecretKeys is the local key e's secrets are sealed with.
func (e *Env) SecretKeys() secrets.DataKeys { return testSecretKeys }
