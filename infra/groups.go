package main

import (
	"time"
)

// This file is the one place that says which Lambdas exist, what they serve,
// how big they are, and what each may touch. The stack reads it; the tests
// check the synthesized template against it and against the API spec.

// TableAccess is what a function may do to the DynamoDB table: nothing
// (the zero value), readOnly or readWrite.
type TableAccess struct {
	// Actions are granted on the table and each index.
	Actions []string
	// ReadOnly: Actions are reads; the function's one write is
	// authentication's UpdateItem, granted on the table alone under
	// authWriteCondition.
	ReadOnly bool
}

// readOnly is the access of a function that authenticates requests and
// otherwise calls only the given reads.
func readOnly(reads ...string) TableAccess {
	return TableAccess{Actions: concat(authReadActions, reads), ReadOnly: true}
}

// readWrite is the access of a function that calls exactly actions.
func readWrite(actions ...string) TableAccess {
	return TableAccess{Actions: concat(actions)}
}

// BucketAccess is how much of the artifact bucket a function may use.
type BucketAccess int

const (
	BucketNone BucketAccess = iota
	// BucketArtifacts: the artifact flow (presigned multipart upload, seal
	// with checksum verification, abort).
	BucketArtifacts
	// BucketDelete: list and delete objects and abort unfinished uploads
	// (expiry of artifacts).
	BucketDelete
)

// Route is an HTTP API route prefix owned by one function. Every prefix is
// routed as ANY <Path>; with Proxy also ANY <Path>/{proxy+}. The function's
// own router answers 404 and 405 inside its prefix.
type Route struct {
	Path  string
	Proxy bool
}

// Group is one Lambda: an HTTP endpoint group or a scheduled job.
type Group struct {
	// Name is the directory functions/<Name> and the function's construct id.
	Name        string
	Description string
	// Routes are the HTTP API prefixes it owns (none for jobs).
	Routes []Route
	// CatchAll makes this function the API's $default route, so a path no
	// group owns still gets the service's own JSON 404 body.
	CatchAll bool
	// Schedule runs the function on an EventBridge rate (jobs only).
	Schedule time.Duration
	// WakeOnOutbox also invokes the function from the table's stream when
	// an event enters the webhook outbox (trigger.go), so delivery starts
	// within about a second; the schedule stays as the safety net.
	WakeOnOutbox bool
	// MemoryMB and Timeout are sized per group; see the comments in Groups.
	MemoryMB int
	Timeout  time.Duration
	Table    TableAccess
	Bucket   BucketAccess
	// SignsLinks functions read the link-signing secret and get
	// LINK_SIGNER_SECRET_ARN.
	SignsLinks bool
	// MakesPreviews functions sign preview links: they get PREVIEW_DOMAIN
	// when the stack has a preview domain (docs/previews.md).
	MakesPreviews bool
	// S3Origin functions get S3_ORIGIN, the artifact bucket's endpoint that
	// presigned URLs point at (the console's policy lets the page connect).
	S3Origin bool
	// PostsToNodes functions post to (or close) nodes' node protocol
	// connections: they get NODE_SOCKET_ENDPOINT (the WebSocket stage's
	// management endpoint) and execute-api:ManageConnections on that stage
	// (websocket.go).
	PostsToNodes bool
	// NamesSocket functions tell nodes where the node protocol is served:
	// they get NODE_SOCKET_URL.
	NamesSocket bool
	// Socket is the node protocol's function: every route of the WebSocket
	// API and its $connect authorizer go to it (websocket.go).
	Socket bool
	// ReservedConcurrency reserves (and caps) the function's concurrent
	// executions (0: none, it shares the account's unreserved pool). A
	// reservation keeps other functions from starving this one, and caps
	// what this one can take from them. docs/scale.md sizes them;
	// the stack leaves them out with the context flag
	// envlease:reservedConcurrency=false (accounts still at a small quota).
	ReservedConcurrency int
	// SignsIdentity functions sign environments' identity tokens: they
	// get IDENTITY_KMS_KEY and ISSUER_URL, and kms:Sign and
	// kms:GetPublicKey on the identity key alone (identity.go).
	SignsIdentity bool
	// SecretsKey is what the function may do with the KMS key that seals
	// organization secrets' data keys (docs/secrets.md): make data keys
	// (SecretsSeal: setting a secret) or open them (SecretsOpen: a node
	// fetching its environment's secrets); it gets SECRETS_KEY_ARN.
	SecretsKey SecretsKeyUse
	// Throttle limits the group's routes on the API stage (nil: the stage's
	// default limit), so one kind of traffic (nodes, people) cannot use up
	// another's share of the account's API Gateway quota.
	Throttle *Throttle
}

// SecretsKeyUse is a function's use of the secrets key: none, seal or open.
type SecretsKeyUse int

const (
	SecretsNone SecretsKeyUse = iota
	SecretsSeal
	SecretsOpen
)

// actions are the KMS actions of the use.
func (u SecretsKeyUse) actions() []string {
	switch u {
	case SecretsSeal:
		return secretsSealActions
	case SecretsOpen:
		return secretsOpenActions
	}
	return nil
}

// Throttle is an API Gateway route limit: steady requests per second and burst.
type Throttle struct {
	Rate, Burst float64
}

// IsJob reports whether the group is a scheduled function.
func (g Group) IsJob() bool { return g.Schedule > 0 }

// Sizing. API functions answer behind API Gateway's 30 s integration limit and
// do a handful of DynamoDB calls per request: 256 MB (which also buys the CPU
// share that keeps Go's cold start near 100 ms on arm64) and a 10 s timeout,
// well above the p99 of a healthy request but short enough that a stuck call
// fails fast. Jobs walk the due-index in pages and may delete many objects, so
// they get more memory and minutes, but stay below their own schedule period
// so two runs of the same job do not overlap.
const (
	apiMemoryMB = 256
	apiTimeout  = 10 * time.Second
)

// Sized for the target of docs/scale.md (10,000 organizations,
// 200,000 live environments, 20,000 leases and 200,000 touches a minute,
// 5,000 nodes). People's environment traffic is about 4,000 requests/s at
// about 20 ms each, 80 executions: 300 reserved leave room for cold starts
// and a slow table. The nodes function is the HTTP fallback of the node
// protocol (its claim long-polls hold an execution each): capped at 200, so
// a fleet that falls back to it cannot take the account's pool. The node
// protocol's function (nodesws) answers about 1,500 short messages a second
// at the target, about 25 executions, plus its one re-offer run: capped at
// 100. The jobs reserve what one run and an overlapping retry need.
// Together 616 of the account's default 1,000, leaving the rest to the
// other functions.
const (
	environmentsReserved = 300
	nodesReserved        = 200
	nodeSocketReserved   = 100
	jobReserved          = 2
	// The delivery job is woken by the table's stream, one run per busy
	// stream shard at a time, besides its schedule: two would throttle
	// (and alarm) as soon as the stream has more than one busy shard.
	deliveriesReserved = 10
)

// Route limits: the environments routes carry people's touches and leases;
// the node routes are apart so a fleet's heartbeats and claims cannot take
// people's share; the stage default covers the other routes.
var (
	environmentsThrottle = &Throttle{Rate: 6000, Burst: 3000}
	nodesThrottle        = &Throttle{Rate: 1000, Burst: 1000}
)

// Groups are the functions of the service.
//
// Table is exactly the table actions a function calls on some path of its
// code, read from its handlers' calls into shared/store (a transaction's
// items count as their own actions: PutItem, UpdateItem, DeleteItem,
// ConditionCheckItem). TestLambdaRuntime fails on one it calls and is not
// granted, and wants a code path named for each granted one its run does
// not call. Every function that authenticates requests has authActions.
// Stopping an environment leased into a sandbox deletes its listen-port
// items, so every function that stops environments has DeleteItem.
var Groups = []Group{
	// The console's sign-in codes are tokens too: a code is asked for with
	// a CLI token and exchanged for a console token, in one transaction
	// that deletes the code, checks the asking key is not revoked and puts
	// the new key.
	// The exchange of CI identity tokens and the trusted issuers it reads
	// (one query of the organization's partition) are tokens too; the
	// exchange fetches issuers' keys over the internet (public addresses
	// only, checked on every connection).
	{Name: "tokens", Description: "CLI tokens, the console's sign-in codes, CI token exchange and trusted issuers",
		Routes:   []Route{{Path: "/v1/tokens", Proxy: true}, {Path: "/v1/console", Proxy: true}, {Path: "/v1/issuers", Proxy: true}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, conditionCheckItem, deleteItem, query)},
	// Revoking a node credential ends its nodes as a lost node is ended
	// (what they ran fails: the lost-node sweep's actions), deletes the
	// records of its node protocol connections and closes them.
	{Name: "keys", Description: "organization API keys, their revocation, and who a token is",
		Routes:   []Route{{Path: "/v1/keys", Proxy: true}, {Path: "/v1/whoami"}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout, PostsToNodes: true,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query, deleteItem)},
	{Name: "sandboxes", Description: "sandbox registration and join keys",
		Routes:   []Route{{Path: "/v1/sandboxes", Proxy: true}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query)},
	// Leasing from a snapshot only checks the artifact in the table; the
	// node that runs the environment gets the signed link (nodes signs).
	// Tunnel and exec tickets are signed with a node's key read from the table (an
	// exec's event is one PutItem), and
	// the tunnels themselves go to the nodes, never through the API.
	// A lease wakes a node of its pool over the node protocol (and forgets
	// a connection that is gone); leasing into a sandbox checks the sandbox.
	// An ended environment's kept log is answered with a signed link.
	{Name: "environments", Description: "leasing, reading, touching and releasing environments, their tunnel and exec tickets and logs",
		// A node asks here where a preview link it signed goes now (its
		// environment paused or moved): the wake and the new link are
		// this group's.
		Routes: []Route{{Path: "/v1/environments", Proxy: true},
			{Path: "/v1/nodes/{id}/environments/{env}/previews/{preview}/route"}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout, PostsToNodes: true, SignsLinks: true, MakesPreviews: true,
		Table:               readWrite(batchGetItem, updateItem, putItem, getItem, query, conditionCheckItem, deleteItem),
		ReservedConcurrency: environmentsReserved, Throttle: environmentsThrottle},
	{Name: "templates", Description: "templates and pools the organization can lease",
		Routes:   []Route{{Path: "/v1/templates"}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout,
		Table: readOnly(query)},
	{Name: "quotas", Description: "per-template quotas and running counts",
		Routes:   []Route{{Path: "/v1/quotas"}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout,
		Table: readOnly(query)},
	// Usage sums per-day records over up to months of history: more memory
	// (and so more CPU) and a longer timeout than the other API functions.
	// It also writes the usage settings and budgets (one item each, put
	// with a version condition, the budgets with their run's registration).
	{Name: "usage", Description: "environment seconds and cost by template, project, person or label; usage settings and budgets",
		Routes:   []Route{{Path: "/v1/usage", Proxy: true}, {Path: "/v1/budgets", Proxy: true}},
		MemoryMB: 512, Timeout: 20 * time.Second,
		Table: readWrite(batchGetItem, updateItem, query, getItem, putItem)},
	{Name: "artifacts", Description: "artifact upload, sealing, listing and signed links",
		Routes:   []Route{{Path: "/v1/artifacts", Proxy: true}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout, Bucket: BucketArtifacts, SignsLinks: true,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query)},
	// A node's claim long-polls for up to about 20 s when nothing is pending:
	// the timeout leaves room for that, under API Gateway's 30 s limit.
	// Registration names the node protocol's WebSocket. A node keeps an
	// environment's log, and a checkpoint it packed, as artifacts of the
	// organization: their uploads are presigned and sealed here, as the
	// artifacts function does.
	// A node fetches the secrets its environment's template binds here:
	// the function opens their data keys, and makes none.
	{Name: "nodes", Description: "node agents: registration, heartbeats, claims, state reports, kept logs, checkpoint uploads, their environments' secrets",
		Routes:   []Route{{Path: "/v1/nodes", Proxy: true}},
		MemoryMB: apiMemoryMB, Timeout: 28 * time.Second, SignsLinks: true, NamesSocket: true, Bucket: BucketArtifacts, SecretsKey: SecretsOpen,
		Table:               readWrite(batchGetItem, updateItem, putItem, getItem, query, conditionCheckItem, deleteItem),
		ReservedConcurrency: nodesReserved, Throttle: nodesThrottle},
	// The node protocol's WebSocket API (websocket.go): every message is a
	// short invocation (a few DynamoDB calls), and the schedule runs the
	// re-offer job for nearly the whole minute, one invocation at a time;
	// the timeout leaves the next run no overlap. Claims sign snapshot links;
	// checkpoint uploads are presigned and sealed as over HTTP (nodes).
	{Name: "nodesws", Description: "the node protocol over a WebSocket: hello, heartbeats, offers, claims, reports, checkpoint uploads; and the re-offer job",
		Schedule: time.Minute, Socket: true, PostsToNodes: true, NamesSocket: true, Bucket: BucketArtifacts,
		MemoryMB: apiMemoryMB, Timeout: 58 * time.Second, SignsLinks: true,
		Table:               readWrite(batchGetItem, updateItem, putItem, getItem, query, conditionCheckItem, deleteItem),
		ReservedConcurrency: nodeSocketReserved},
	// The environments' OIDC issuer (docs/identity.md): its discovery
	// document and keys, the claims of an environment's identity, and the
	// tokens a node fetches for an environment it runs. The one function
	// that may sign with the identity key; it reads a node and an
	// environment.
	{Name: "identity", Description: "the environments' OIDC issuer: discovery, keys, claims, and nodes' tokens",
		Routes: []Route{{Path: "/.well-known", Proxy: true}, {Path: "/v1/environments/{id}/identity"},
			{Path: "/v1/nodes/{id}/environments/{env}/identity"}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout, SignsIdentity: true,
		Table: readOnly(getItem)},
	// Events are read only: the writes that record them are the other groups'.
	{Name: "events", Description: "an organization's events",
		Routes:   []Route{{Path: "/v1/events"}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout,
		Table: readOnly(query)},
	// Creating a webhook resolves its host name (the address check).
	{Name: "webhooks", Description: "webhooks, their deliveries and retries",
		Routes:   []Route{{Path: "/v1/webhooks", Proxy: true}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query, deleteItem)},
	// Organization secrets: setting one makes a data key (and never opens
	// one); the item and its event are one transaction.
	{Name: "secrets", Description: "organization secrets, write-only",
		Routes:   []Route{{Path: "/v1/secrets", Proxy: true}},
		MemoryMB: apiMemoryMB, Timeout: apiTimeout, SecretsKey: SecretsSeal,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query, deleteItem)},
	// The API description is embedded and public, and the catch-all only
	// answers 404: no data access, and the smallest size does.
	{Name: "docs", Description: "the OpenAPI document; also answers paths no group owns",
		Routes:   []Route{{Path: "/v1/openapi.json"}, {Path: "/v1/openapi.yaml"}},
		CatchAll: true,
		MemoryMB: 128, Timeout: 5 * time.Second},
	// The web console: embedded static files, public, no data access.
	{Name: "console", Description: "the web console's page and files",
		Routes:   []Route{{Path: "/"}, {Path: "/console", Proxy: true}},
		MemoryMB: 128, Timeout: 5 * time.Second, S3Origin: true},
	// Runs every minute: stops taking work 5 s before its timeout, so it
	// ends well inside the minute and the next run goes on.
	// It tells a node of every environment of its that it stops (a stop message
	// on the node protocol's connection).
	{Name: "timeouts", Description: "stops environments past their idle or hard deadline",
		Schedule: time.Minute, PostsToNodes: true,
		MemoryMB: 512, Timeout: 50 * time.Second, ReservedConcurrency: jobReserved,
		// conditionCheckItem: the budget run drops an organization's
		// registration only while it still has no budgets.
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query, deleteItem, conditionCheckItem)},
	// The lost-node sweep has its own schedule and reservation, so a long
	// timeout run never delays it.
	{Name: "lostnodes", Description: "declares lost the nodes that stopped heartbeating and fails what they ran",
		Schedule: time.Minute,
		MemoryMB: 256, Timeout: 50 * time.Second, ReservedConcurrency: jobReserved,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query, deleteItem)},
	// Woken by the table's stream when events enter the outbox, and every
	// minute, POSTing to receivers (10 s each at most, 8 at a time) until
	// the outbox is empty or 15 s are left: it stops starting pages before
	// its timeout, and the next run picks up the rest. Its reservation also
	// caps how many stream-woken runs overlap (trigger.go). Holding a
	// delivery checks its webhook is still disabled; the attempt that
	// reaches the failure limit disables the webhook.
	{Name: "deliveries", Description: "delivers events to webhooks, with retries",
		Schedule: time.Minute, WakeOnOutbox: true,
		MemoryMB: 256, Timeout: 55 * time.Second, ReservedConcurrency: deliveriesReserved,
		Table: readWrite(batchGetItem, updateItem, putItem, query, conditionCheckItem)},
	// Runs every 15 minutes and may delete many objects.
	{Name: "expiry", Description: "removes expired artifacts and their objects",
		Schedule: 15 * time.Minute,
		MemoryMB: 512, Timeout: 5 * time.Minute, Bucket: BucketDelete, ReservedConcurrency: jobReserved,
		Table: readWrite(batchGetItem, updateItem, putItem, getItem, query)},
}

// GroupNames returns the names of groups, in order.
func GroupNames(groups []Group) []string {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name
	}
	return names
}
