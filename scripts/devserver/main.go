// Command devserver runs the whole service on one machine: an in-process
// DynamoDB (minidyn), an S3 gateway (versitygw, built from the pinned module
// on first run), the table and bucket, the demo organizations, and every
// endpoint group on one address.
package main

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/store"
)

//go:embed demo.json
var demoFixture []byte

// deps is what the route groups and background jobs are built from.
type deps struct {
	ctx    context.Context
	store  *store.Store
	clock  clock.Clock
	log    *slog.Logger
	s3     *s3.Client
	bucket string
	// s3Endpoint is where presigned URLs point: the console may connect there.
	s3Endpoint string
	baseURL    string
	// issuer is the identity issuer's URL (-issuer; the base URL when empty).
	issuer string
	sweep  time.Duration
	// fixture is the loaded configuration: the node agent serves its pools.
	fixture fixture.File
	// agents is options.agents.
	agents func(org, pool string, a *agent.Agent)
	// sockets serves the node protocol (nodes.SocketPath) and posts to its
	// connections; offerer wakes a node after a lease and re-offers.
	sockets *nodes.LocalSockets
	offerer *nodes.Offerer
	// stopper tells a node that an environment it runs is stopping, and
	// re-sends what was lost.
	stopper *nodes.Stopper
	// webhooks is how often the delivery job runs; allowLocalHooks lets
	// webhooks point at loopback and plain HTTP (-webhooks-allow-local).
	webhooks        time.Duration
	allowLocalHooks bool
	// allowLocalIssuers lets trusted OIDC issuers be on loopback and plain
	// HTTP (-oidc-allow-local): a CI identity provider on this machine.
	allowLocalIssuers bool
	// capacity is how many environments each agent runs at once.
	capacity int
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address of the API (log in with envlease login --url http://<addr>)")
	logFile := flag.String("log-file", defaultLogFile(), "where the JSON request log goes (- for standard error); warnings and errors are shown here too")
	fixturePath := flag.String("fixture", "", "organization configuration file (default: the built-in demo, scripts/devserver/demo.json)")
	sweep := flag.Duration("sweep", 15*time.Second, "how often the timeout and expiry jobs and the lost-node sweep run")
	dataDir := flag.String("data", "", "folder for S3 objects (default: a temporary folder removed on exit)")
	logLevel := flag.String("log", "info", "log level: debug, info, warn, error")
	hooks := flag.Duration("webhooks", 2*time.Second, "how often the webhook delivery job runs (0: never)")
	allowLocal := flag.Bool("webhooks-allow-local", false, "accept webhook URLs on loopback addresses and plain http (a receiver on this machine); never in AWS")
	allowLocalOIDC := flag.Bool("oidc-allow-local", false, "accept trusted OIDC issuers on loopback addresses and plain http (an identity provider on this machine); never in AWS")
	containers := flag.Bool("containers", true, "offer the demo's container templates (box, warmbox) when the agent is root and the pinned runc is built (the first start builds it)")
	capacity := flag.Int("capacity", defaultCapacity, "how many environments each local node agent runs at once (a crowd of parallel jobs wants more)")
	issuer := flag.String("issuer", "", "the URL of the environments' identity issuer (docs/identity.md): a public HTTPS address that reaches this server, for a cloud to fetch its keys (default: the API's own address)")
	dynamo := flag.String("dynamo", "minidyn", "the local DynamoDB: minidyn (in-process, starts at once) or local (Amazon's DynamoDB Local; needs Java, strict like DynamoDB)")
	flag.Parse()

	log, closeLog, err := openLog(*logFile, *logLevel, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "devserver:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := options{addr: *addr, fixture: *fixturePath, dataDir: *dataDir, dynamo: *dynamo, sweep: *sweep, out: os.Stdout, progress: os.Stderr,
		webhooks: *hooks, allowLocalHooks: *allowLocal, allowLocalIssuers: *allowLocalOIDC, containers: *containers, capacity: *capacity, logFile: *logFile, issuer: *issuer}
	err = run(ctx, opts, log)
	closeLog()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devserver:", err)
		os.Exit(1)
	}
}

// options are the command's flags; tests set them directly.
type options struct {
	addr, fixture, dataDir string
	// dynamo is "minidyn" or "local" (DynamoDB Local).
	dynamo string
	// testDynamo, when set, is the DynamoDB to serve from instead: the tests
	// hand in the one of their pass, and close it themselves.
	testDynamo *devstack.Dynamo
	sweep      time.Duration
	// webhooks and allowLocalHooks are -webhooks and -webhooks-allow-local.
	webhooks        time.Duration
	allowLocalHooks bool
	// allowLocalIssuers is -oidc-allow-local.
	allowLocalIssuers bool
	// containers adds the demo's container templates where runc runs
	// (containerDemo); only with the built-in demo.
	containers bool
	// out receives the banner; progress the start-up and shutdown notes.
	out, progress io.Writer
	// logFile is -log-file, for the banner to name.
	logFile string
	// issuer is -issuer.
	issuer string
	// ready, when set, is called with the base URL once the API serves.
	ready func(baseURL string)
	// wrap, when set, wraps the API's handler: the end-to-end tests check
	// every answer against the API description through it.
	wrap func(http.Handler) http.Handler
	// sockets, when set, is handed the node protocol's server: tests lose
	// messages and cut connections with it.
	sockets func(*nodes.LocalSockets)
	// agents, when set, is handed each node agent the stack starts, keyed
	// by organization and pool: benchmarks wait for its warm pool.
	agents func(org, pool string, a *agent.Agent)
	// capacity is -capacity: how many environments each agent runs at
	// once (0: defaultCapacity).
	capacity int
	// edit, when set, changes the configuration before it is loaded (after
	// the demo's container templates are added): benchmarks add theirs.
	edit func(*fixture.File)
}

// defaultCapacity is how many environments each local agent runs at once.
const defaultCapacity = 16

// run starts the stack and serves until ctx ends, then stops all it started.
func run(ctx context.Context, o options, log *slog.Logger) error {
	addr, sweep := o.addr, o.sweep
	tuneGC()
	if o.progress == nil {
		o.progress = io.Discard
	}
	cfg := demoFixture
	if o.fixture != "" {
		b, err := os.ReadFile(o.fixture)
		if err != nil {
			return fmt.Errorf("read fixture: %w", err)
		}
		cfg = b
	}
	file, err := fixture.Parse(cfg)
	if err != nil {
		return err
	}
	containerNote := ""
	if o.containers && o.fixture == "" {
		var stopRegistry func()
		containerNote, stopRegistry = containerDemo(ctx, &file, o.progress)
		defer stopRegistry()
	}
	if o.edit != nil {
		o.edit(&file)
	}

	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen on %s: the address is already in use (another dev server?): stop what has it, or start this one on another address with -addr, such as -addr 127.0.0.1:8081, and log in with envlease login --url http://127.0.0.1:8081", addr)
	}
	if err != nil {
		return fmt.Errorf("listen on %s (-addr): %w", addr, err)
	}
	defer ln.Close()

	be, err := startBackends(ctx, o)
	if err != nil {
		return err
	}
	defer be.stop()

	st := store.New(be.dynamo, be.table)
	clk := clock.System{}
	if err := fixture.Apply(ctx, st, file, fixture.Options{WithTokens: true, Now: clk.Now()}); err != nil {
		return fmt.Errorf("load fixture: %w", err)
	}

	d := deps{
		ctx: ctx, store: st, clock: clk, log: log, s3: be.s3, bucket: be.bucket, s3Endpoint: be.s3Endpoint,
		baseURL: "http://" + ln.Addr().String(), issuer: o.issuer, sweep: sweep, fixture: file,
		webhooks: o.webhooks, allowLocalHooks: o.allowLocalHooks, allowLocalIssuers: o.allowLocalIssuers, agents: o.agents,
		capacity: cmp.Or(o.capacity, defaultCapacity),
	}
	if err := devstack.AllowBrowserOrigin(ctx, be.s3, be.bucket, d.baseURL); err != nil {
		// Only the console's uploads and downloads need it; the API and
		// the CLI work without.
		fmt.Fprintf(o.progress, "warning: %v; the console cannot upload or download artifacts\n", err)
	}
	authn := auth.New(st, clk, log)
	// The stopper comes first: the node service pushes pauses through it,
	// and it posts on the sockets made with that service.
	posts := &latePoster{}
	d.stopper = nodes.NewStopper(st, posts, clk, log, devReofferAfter)
	d.sockets = nodes.NewLocalSockets(ctx, nodes.NewSocket(nodeService(d, artifactService(d)), st, log), authn)
	defer d.sockets.Close()
	posts.to = d.sockets
	d.offerer = nodes.NewOfferer(st, d.sockets, clk, log, devReofferAfter)
	if o.sockets != nil {
		o.sockets(d.sockets)
	}
	var h http.Handler = httpapi.New(httpapi.Config{Logger: log, Auth: authn}, routes(d)...)
	if o.wrap != nil {
		h = o.wrap(h)
	}
	if be.dynamoKind == devstack.KindMinidyn || be.dynamoKind == devstack.KindDynamoLocal {
		// A crowd of leases: the leases already made go first
		// (devstack.WorkFirst). Only where the whole stack, its DynamoDB
		// included, shares this machine's cores: a lease made against
		// endpoints elsewhere (AWS_ENDPOINT_URL) mostly waits on the
		// network, and holding it back would only make it later.
		h = devstack.WorkFirst(h, runtime.GOMAXPROCS(0))
	}
	// The node protocol's WebSocket is served beside the API, as API
	// Gateway's WebSocket API is in AWS.
	mux := http.NewServeMux()
	mux.Handle(nodes.SocketPath, d.sockets)
	mux.Handle("/", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	// The agents and jobs stop before the API closes, so an agent can still
	// deregister its node on the way out.
	stopBackground := startBackground(d)
	var stopOnce sync.Once
	stopAll := func() { stopOnce.Do(stopBackground) }
	defer stopAll()

	printBanner(o.out, d.baseURL, be, file, containerNote, o.logFile)
	if o.ready != nil {
		o.ready(d.baseURL)
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		fmt.Fprintln(o.progress, "\nstopping…")
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	stopAll()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); errors.Is(err, context.DeadlineExceeded) {
		// Everything of ours has stopped; a client that still holds a
		// connection after 5 s is cut off rather than waited for.
		return srv.Close()
	} else if err != nil {
		return err
	}
	return nil
}

func printBanner(w io.Writer, base string, be backends, f fixture.File, containers, logFile string) {
	fmt.Fprintf(w, "\nenvlease is running at %s  (another address: -addr)\n", base)
	fmt.Fprintf(w, "  Console:       %s/  (sign in with a demo token below)\n", base)
	fmt.Fprintf(w, "  DynamoDB (%s): %s  table %s\n", be.dynamoKind, be.dynamoEndpoint, be.table)
	fmt.Fprintf(w, "  S3 (%s):     %s  bucket %s\n", be.s3Kind, be.s3Endpoint, be.bucket)
	if containers != "" {
		fmt.Fprintf(w, "  %s\n", containers)
	}
	if logFile != "" && logFile != "-" {
		fmt.Fprintf(w, "  Request log:   %s  (warnings and errors show here too; -log-file - puts it all here)\n", logFile)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Demo tokens:")
	for _, o := range f.Orgs {
		for _, u := range o.Users {
			for _, t := range u.Tokens {
				fmt.Fprintf(w, "  %-8s %-6s %-7s %s\n", o.ID, u.ID, u.Role, t)
			}
		}
	}
	fmt.Fprintf(w, "\nTry: echo %s | envlease login --url %s\n", firstToken(f), base)
	fmt.Fprintf(w, " or: curl -s -H 'Authorization: Bearer %s' %s/v1/keys\n", firstToken(f), base)
	fmt.Fprintln(w, "Stop with Ctrl-C.")
}

func firstToken(f fixture.File) string {
	for _, o := range f.Orgs {
		for _, u := range o.Users {
			if len(u.Tokens) > 0 {
				return u.Tokens[0]
			}
		}
	}
	return "<token>"
}

// tuneGC lets the heap grow to five times what is live before a collection
// (GOGC=400, not Go's 100), below a soft limit of 1 GiB past which Go
// collects as often as it must. The whole local stack (the API, the embedded
// DynamoDB, the agent) shares this one process, and its garbage is mostly
// each request's short-lived buffers: collecting a quarter as often took
// about a tenth off the CPU a crowd of 100 leases costs (9.6 against 10.4 ms
// a run, docs/performance.md, A crowd at once), for tens of MB of heap.
// GOGC or GOMEMLIMIT set by the user win.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(1 << 30)
	}
}
