// Package clienttest runs the whole service in the test's process for tests
// of API clients (shared/client, the envlease CLI): the local DynamoDB and S3
// of shared/devstack, the test organizations of shared/apitest, every endpoint
// group on a loopback port, and a node agent per pool, as the dev server runs
// them. Time is real: clients sign, wait and download as they would against a
// deployment. Start runs one for a test; Main runs one for a whole test
// binary, for examples, which have no *testing.T. It is imported only by
// tests.
package clienttest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/console"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/federation"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/identity"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/openapi"
	"github.com/envlease/envlease/shared/sandboxes"
	"github.com/envlease/envlease/shared/secrets"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/templates"
	"github.com/envlease/envlease/shared/usage"
	"github.com/envlease/envlease/shared/webhooks"
)

// Tokens of the organizations the stack serves (shared/apitest's fixture):
// acme's admin alice and member bob, and globex's admin carol.
const (
	AliceToken = apitest.AliceToken
	BobToken   = apitest.BobToken
	CarolToken = apitest.CarolToken
)

// Stack is a running service.
type Stack struct {
	// URL is the API's base URL, http://127.0.0.1:<port>.
	URL   string
	Store *store.Store
}

// nodeOptions are the dev server's: a heartbeat a second and claims that look
// every 100 ms, so a lease is ready within moments.
var nodeOptions = nodes.Options{HeartbeatInterval: time.Second, PollMax: 100 * time.Millisecond}

// Option changes the stack Start runs.
type Option func(*config)

// config is what the options set: the fixture the stack applies, and how
// object storage answers.
type config struct {
	file fixture.File
	// uploadRate, when above zero, bounds the bytes a second that object
	// storage reads of each upload (see WithUploadRate).
	uploadRate int
}

// WithUploadRate puts object storage behind a front that reads each
// request body at most bytesPerSecond, as a real network would: a
// browser's progress bar then has time to show the parts between empty and
// full. The throttle is on the stack's side, so it needs nothing of the
// client (no browser's network emulation).
func WithUploadRate(bytesPerSecond int) Option {
	return func(c *config) { c.uploadRate = bytesPerSecond }
}

// WithTemplates adds templates to the organization org (acme, globex) of
// the test fixture, run by its first pool unless they name pools; the
// fixture itself stays as other tests count it.
func WithTemplates(org string, ts ...domain.Template) Option {
	return func(c *config) {
		f := &c.file
		for i := range f.Orgs {
			if f.Orgs[i].ID != org {
				continue
			}
			for _, t := range ts {
				if len(t.Pools) == 0 {
					t.Pools = f.Orgs[i].Pools[:1]
				}
				f.Orgs[i].Templates = append(f.Orgs[i].Templates, t)
			}
		}
	}
}

// WithFixture serves f instead of the test fixture: the dev server's demo,
// for the documentation's examples, which are written against it.
func WithFixture(f fixture.File) Option {
	return func(c *config) { c.file = f }
}

// Start runs the stack until the test ends. Every answer the API gives is
// checked against the API description, as in the dev server's own tests.
func Start(t testing.TB, opts ...Option) *Stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dyn := devstack.NewTestDynamo(t)
	s3 := devstack.NewTestS3(t)
	st := store.New(dyn.Client(ctx), dyn.Table)
	clk := clock.System{}
	log := apitest.DiscardLogger()
	cfg := config{file: apitest.Fixture(t)}
	for _, o := range opts {
		o(&cfg)
	}
	file := cfg.file
	if cfg.uploadRate > 0 {
		s3 = throttledS3(t, s3, cfg.uploadRate)
	}
	if err := file.Validate(); err != nil {
		cancel()
		t.Fatalf("fixture with the test's templates: %v", err)
	}
	if err := fixture.Apply(ctx, st, file, fixture.Options{WithTokens: true, Now: clk.Now()}); err != nil {
		cancel()
		t.Fatalf("apply fixture: %v", err)
	}
	blobs := blob.New(blob.Options{Client: s3.Client(ctx), Bucket: s3.Bucket, Clock: clk})
	artifactSvc := artifacts.NewService(st, blobs, clk, artifacts.Options{})
	secretSvc := secrets.NewService(st, secrets.NewRandomLocalKeys(), clk, log)
	nodeOpt := nodeOptions
	nodeOpt.Secrets = secretSvc
	nodeSvc := nodes.NewService(st, artifactSvc, clk, nodeOpt)
	// Revoking a node credential ends its nodes, as the keys function does.
	keySvc := keys.NewService(st, clk, keys.WithConnectionCloser(nodes.NewRevocations(st, nil, nodeSvc, log)))
	tplSvc := templates.NewService(st)
	envSvc := environments.NewService(st, clk, environments.WithLinks(artifactSvc), environments.WithChanges(st))
	// The server's address is known before it serves: it is the identity
	// issuer's URL, as the dev server's own address is.
	srv := httptest.NewUnstartedServer(nil)
	issuer := identity.NewIssuer("http://"+srv.Listener.Addr().String(), identity.NewLocal(st, clk), clk)
	h := httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)},
		keys.TokenRoutes(keySvc), keys.KeyRoutes(keySvc),
		sandboxes.Routes(sandboxes.NewService(st, clk)),
		environments.Routes(envSvc),
		identity.Routes(identity.NewService(issuer, nodeSvc, envSvc)),
		templates.Routes(tplSvc), templates.QuotaRoutes(tplSvc),
		artifacts.Routes(artifactSvc),
		usage.Routes(usage.NewService(st, clk)),
		budgets.Routes(budgets.NewService(st, clk)),
		nodes.Routes(nodeSvc),
		openapi.Routes(),
		console.Routes(console.Options{S3Origin: devstack.Origin(s3.Endpoint)}),
		events.Routes(events.NewService(st, clk)),
		webhooks.Routes(webhooks.NewService(st, clk, webhooks.Guard{})),
		// Trusted issuers may be on loopback: a test's local OIDC issuer.
		federation.Routes(federation.NewService(st, clk, webhooks.Guard{AllowLocal: true},
			federation.NewVerifiers(webhooks.Guard{AllowLocal: true}.Client(10*time.Second, nil), clk), log)),
		secrets.Routes(secretSvc),
	)
	// The console's files are not the API: the API description does not
	// hold them, so only API answers are checked against it.
	checked := apitest.CheckedHandler(t, h)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if console.Serves(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		checked.ServeHTTP(w, r)
	})
	srv.Start()
	if err := devstack.AllowBrowserOrigin(ctx, s3.Client(ctx), s3.Bucket, srv.URL); err != nil {
		cancel()
		srv.Close()
		t.Fatal(err)
	}
	s := &Stack{URL: srv.URL, Store: st}
	stopAgents := startAgents(ctx, t, s, file, clk)
	// Cleanups run last-in first-out: the agents stop (and deregister)
	// while the API still answers, then the server closes, then the
	// stores that NewTestDynamo and NewTestS3 registered.
	t.Cleanup(func() {
		cancel()
		stopAgents()
		srv.Close()
	})
	return s
}

// startAgents runs the reference node agent for every pool of every
// organization, with a node credential issued in process as an admin would.
func startAgents(ctx context.Context, t testing.TB, s *Stack, file fixture.File, clk clock.Clock) func() {
	svc := nodes.NewService(s.Store, nil, clk, nodeOptions)
	dir := t.TempDir()
	var wg sync.WaitGroup
	for _, o := range file.Orgs {
		admin := domain.Principal{OrgID: o.ID, UserID: "clienttest", Role: domain.RoleAdmin, Credential: domain.CredentialCLI}
		for _, pool := range o.Pools {
			issued, err := svc.IssueCredential(ctx, admin, pool, "clienttest agent ("+pool+")")
			if err != nil {
				t.Fatalf("node credential for %s/%s: %v", o.ID, pool, err)
			}
			a, err := agent.New(agent.Config{
				API: s.URL, Token: issued.Token, Address: "127.0.0.1",
				WorkDir: filepath.Join(dir, o.ID, pool), Name: "clienttest-" + o.ID + "-" + pool,
				Capacity: 16, Grace: 2 * time.Second, HTTP: &http.Client{}, Log: apitest.DiscardLogger(),
			})
			if err != nil {
				t.Fatalf("node agent for %s/%s: %v", o.ID, pool, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = a.Run(ctx) // returns when ctx ends, after stopping its processes
			}()
		}
	}
	return wg.Wait
}
