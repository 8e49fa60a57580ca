package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/usage"
)

// The response shapes are the API's; where shared/domain already has the
// shape (environments, sandboxes, templates, keys, artifacts, links) it is
// reused, so the client and the service cannot drift apart.

// IssuedKey is a new token, shown only in this answer, and its record.
type IssuedKey struct {
	// Token is the bearer token; the service keeps only its hash.
	Token string `json:"token"`
	// APIKey is the token's record, as ListKeys shows it.
	APIKey domain.APIKey `json:"apiKey"`
}

// Identity is who the client's token acts as (GET /v1/whoami).
type Identity struct {
	// Organization is the organization's id.
	Organization string `json:"organization"`
	// User is the person a CLI token acts as; empty for an organization key.
	User string `json:"user"`
	// Role is the role in force now; an organization key has member rights.
	Role domain.Role `json:"role"`
	// Key is the record of the token in use.
	Key domain.APIKey `json:"key"`
}

// SandboxRegistration is the body of POST /v1/sandboxes.
type SandboxRegistration struct {
	// Name is 1-100 characters, such as the machine's host name.
	Name string `json:"name"`
	// Hostname is the machine's host name, for display.
	Hostname string `json:"hostname,omitempty"`
	// PublicKey is the machine's public key (an SSH key line), kept with
	// the record; at most 4096 bytes.
	PublicKey string `json:"publicKey,omitempty"`
}

// RegisteredSandbox is a new sandbox and its single-use join key.
type RegisteredSandbox struct {
	// Sandbox is the new record, not joined yet.
	Sandbox domain.Sandbox `json:"sandbox"`
	// JoinKey (els_join_…) is redeemed once with JoinSandbox.
	JoinKey string `json:"joinKey"`
}

// ShareRequest asks for a template's share in a lease.
type ShareRequest struct {
	// Name is one of the template's shares.
	Name string `json:"name"`
	// LocalPath is the folder on the client the files came from, for
	// display.
	LocalPath string `json:"localPath,omitempty"`
	// Files are the shared files' relative, slash-separated paths, for
	// display (the files travel in Artifact): at most 500 names and 128 KiB
	// of names over all shares of a lease.
	Files []string `json:"files,omitempty"`
	// Artifact is a sealed artifact holding the share's files (a tar,
	// zstd-compressed), unpacked at the share's path before the command starts.
	Artifact string `json:"artifact,omitempty"`
}

// LeaseRequest is the body of POST /v1/environments, plus the
// Idempotency-Key header.
type LeaseRequest struct {
	// Template is the name of one of the organization's templates.
	Template string `json:"template"`
	// Name is the environment's name (default: the template's).
	Name string `json:"name,omitempty"`
	// Labels are at most 32 key-value pairs, kept with the environment.
	Labels map[string]string `json:"labels,omitempty"`
	// Project is a free reference (at most 200 characters) to group
	// environments by.
	Project string `json:"project,omitempty"`
	// Pool is a pool that runs the template (default: the template's first).
	Pool string `json:"pool,omitempty"`
	// Sandbox is a registered sandbox of the organization, the machine the
	// exports get listen addresses on; empty for none.
	Sandbox string `json:"sandbox,omitempty"`
	// Shares send files into the template's shares.
	Shares []ShareRequest `json:"shares,omitempty"`
	// Snapshot is a sealed, unexpired artifact to restore the environment
	// from.
	Snapshot string `json:"snapshot,omitempty"`
	// Idle is the idle timeout, a duration such as "30m", at most the
	// template's; empty takes the template's.
	Idle string `json:"idle,omitempty"`
	// Hard is the hard timeout, like Idle.
	Hard string `json:"hard,omitempty"`
	// Network narrows the template's network policy for this environment
	// (a template with network open or rules); nil for the template's alone.
	Network *domain.EnvNetwork `json:"network,omitempty"`
	// IdempotencyKey, when set, is sent as Idempotency-Key: the service
	// answers a repeat within 24 hours with the first answer and leases
	// nothing, which also lets this client retry the lease after a 502/503.
	IdempotencyKey string `json:"-"`
}

// Leased is a new environment and the sandbox's new configuration.
type Leased struct {
	// Environment is the new environment, pending until a node claims it.
	Environment domain.Environment `json:"environment"`
	// Config is what the sandbox needs to forward the exports and sync the
	// shares.
	Config domain.SandboxConfig `json:"config"`
	// Replayed is set when the answer is the stored one of an earlier lease
	// with the same Idempotency-Key.
	Replayed bool `json:"-"`
}

// EnvironmentQuery selects a page of environments. The zero value is the
// first page of live environments, of the service's default size.
type EnvironmentQuery struct {
	// State is "live" (the default: pending, starting and ready), or one
	// state.
	State string
	// Limit is the page size, 1 to 200 (0: the service's default, 50).
	Limit int
	// Cursor is the Next of the previous page; empty for the first.
	Cursor string
}

// EnvironmentPage is one page of environments, newest first.
type EnvironmentPage struct {
	// Environments are the page's environments.
	Environments []domain.Environment `json:"environments"`
	// Next is the cursor of the following page; empty on the last.
	Next string `json:"next,omitempty"`
}

// TemplateList is the organization's templates and the pools that run them.
type TemplateList struct {
	// Templates are the templates the organization can lease.
	Templates []domain.Template `json:"templates"`
	// Pools are the names of the organization's pools.
	Pools []string `json:"pools"`
}

// UsageEntry is the seconds of environment time of one template on one UTC day.
type UsageEntry struct {
	// Template is the template's name.
	Template string `json:"template"`
	// Day is YYYY-MM-DD.
	Day string `json:"day"`
	// Seconds is environment time (created to stopped, or to now while
	// live) within the day.
	Seconds int64 `json:"seconds"`
	// Value is the group when the report was grouped (UsageQuery.By).
	Value *string `json:"value,omitempty"`
	// Cost is the seconds' cost when the organization set rates.
	Cost *float64 `json:"cost,omitempty"`
}

// UsageReport is usage from Since through today, by day, then template.
type UsageReport struct {
	// Since is the first UTC day reported.
	Since time.Time `json:"since"`
	// Usage are the entries by day, then template.
	Usage []UsageEntry `json:"usage"`
	// Until, By, Filter, GroupedSince and Currency come with grouped
	// reports and rates (UsageBy).
	Until        string `json:"until,omitempty"`
	By           string `json:"by,omitempty"`
	Filter       string `json:"filter,omitempty"`
	GroupedSince string `json:"groupedSince,omitempty"`
	Currency     string `json:"currency,omitempty"`
	// Paused are the paused environments now, per template, and their
	// checkpoints' stored bytes; absent when none is.
	Paused []usage.PausedEntry `json:"paused,omitempty"`
}

// PageQuery selects a page of a listing.
type PageQuery struct {
	// Limit is the page size (0: the service's default, 50): at most 200,
	// or 100 for a webhook's deliveries.
	Limit int
	// Cursor is the Next of the previous page; empty for the first.
	Cursor string
}

// ArtifactPage is one page of sealed, unexpired artifacts, newest first.
type ArtifactPage struct {
	// Artifacts are the page's artifacts.
	Artifacts []domain.Artifact `json:"artifacts"`
	// Next is the cursor of the following page; empty on the last.
	Next string `json:"next,omitempty"`
}

// CreateToken issues a CLI token acting as the caller (a person).
func (c *Client) CreateToken(ctx context.Context, name string) (IssuedKey, error) {
	var out IssuedKey
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tokens", body: map[string]string{"name": name, "source": "cli"}}, &out)
	return out, err
}

// ConsoleCode is a console sign-in code: it works once, until Expires.
type ConsoleCode struct {
	Code    string    `json:"code"`
	Expires time.Time `json:"expires"`
}

// CreateConsoleCode asks for a sign-in code for the web console, which the
// page at /#code=<code> exchanges for a console token of the caller. Only a
// person's own CLI token may ask.
func (c *Client) CreateConsoleCode(ctx context.Context) (ConsoleCode, error) {
	var out ConsoleCode
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/console/codes", body: struct{}{}}, &out)
	return out, err
}

// ExchangeConsoleCode spends a sign-in code for a console token (what the
// console's page does; the client needs no token of its own for it). A code
// works once.
func (c *Client) ExchangeConsoleCode(ctx context.Context, code string) (IssuedKey, error) {
	var out IssuedKey
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/console/sessions", body: map[string]string{"code": code}}, &out)
	return out, err
}

// CreateKey issues an organization API key (admins only).
func (c *Client) CreateKey(ctx context.Context, name string) (IssuedKey, error) {
	var out IssuedKey
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/keys", body: map[string]string{"name": name}}, &out)
	return out, err
}

// ListKeys lists the key records the caller may see.
func (c *Client) ListKeys(ctx context.Context) ([]domain.APIKey, error) {
	var out struct {
		Keys []domain.APIKey `json:"keys"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/keys", retry: true}, &out)
	return out.Keys, err
}

// RevokeKey revokes a key; revoking again returns the same record.
func (c *Client) RevokeKey(ctx context.Context, id string) (domain.APIKey, error) {
	var out struct {
		APIKey domain.APIKey `json:"apiKey"`
	}
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/keys/" + seg(id), retry: true}, &out)
	return out.APIKey, err
}

// Whoami tells who the token acts as.
func (c *Client) Whoami(ctx context.Context) (Identity, error) {
	var out Identity
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/whoami", retry: true}, &out)
	return out, err
}

// RegisterSandbox registers a machine; the join key is shown only here.
func (c *Client) RegisterSandbox(ctx context.Context, r SandboxRegistration) (RegisteredSandbox, error) {
	var out RegisteredSandbox
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/sandboxes", body: r}, &out)
	return out, err
}

// JoinSandbox redeems a join key, once.
func (c *Client) JoinSandbox(ctx context.Context, joinKey string) (domain.Sandbox, error) {
	var out struct {
		Sandbox domain.Sandbox `json:"sandbox"`
	}
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/sandboxes/join", body: map[string]string{"joinKey": joinKey}}, &out)
	return out.Sandbox, err
}

// ListSandboxes lists the organization's sandboxes, newest first.
func (c *Client) ListSandboxes(ctx context.Context) ([]domain.Sandbox, error) {
	var out struct {
		Sandboxes []domain.Sandbox `json:"sandboxes"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/sandboxes", retry: true}, &out)
	return out.Sandboxes, err
}

// GetSandbox reads a sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (domain.Sandbox, error) {
	var out struct {
		Sandbox domain.Sandbox `json:"sandbox"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/sandboxes/" + seg(id), retry: true}, &out)
	return out.Sandbox, err
}

// Lease leases an environment. It answers at once with the environment
// pending; a node then claims and starts it: WaitReady until its state is
// ready, or no longer live (failed, stopped). With an
// IdempotencyKey the lease is retried after a 502 or 503, and a repeat gets
// the first answer.
func (c *Client) Lease(ctx context.Context, r LeaseRequest) (Leased, error) {
	cl := call{method: http.MethodPost, path: "/v1/environments", body: r}
	if r.IdempotencyKey != "" {
		cl.header = http.Header{"Idempotency-Key": {r.IdempotencyKey}}
		cl.retry = true
	}
	var out Leased
	h, err := c.do(ctx, cl, &out)
	if err == nil {
		out.Replayed = h.Get("Idempotent-Replayed") == "true"
	}
	return out, err
}

// ListEnvironments reads one page of environments.
func (c *Client) ListEnvironments(ctx context.Context, q EnvironmentQuery) (EnvironmentPage, error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", q.State)
	}
	pageParams(v, q.Limit, q.Cursor)
	var out EnvironmentPage
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments", query: v, retry: true}, &out)
	return out, err
}

// GetEnvironment reads an environment in any state.
func (c *Client) GetEnvironment(ctx context.Context, id string) (domain.Environment, error) {
	var out domain.Environment
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(id), retry: true}, &out)
	return out, err
}

// DeleteEnvironment ends a lease; deleting again returns the record as it is.
func (c *Client) DeleteEnvironment(ctx context.Context, id string) (domain.Environment, error) {
	var out domain.Environment
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/environments/" + seg(id), retry: true}, &out)
	return out, err
}

// TouchEnvironment moves the idle deadline forward. A touch is safe to
// repeat (it never moves the deadline backwards), so it is retried.
func (c *Client) TouchEnvironment(ctx context.Context, id string) (domain.Environment, error) {
	var out domain.Environment
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(id) + "/touch", retry: true}, &out)
	return out, err
}

// WakeEnvironment wakes a paused environment (pending again, restored from
// its checkpoint on a node of its pool) and returns it; any other
// environment comes back as it is. Waking twice is harmless, so it is
// retried.
func (c *Client) WakeEnvironment(ctx context.Context, id string) (domain.Environment, error) {
	var out domain.Environment
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(id) + "/wake", retry: true}, &out)
	return out, err
}

// Templates lists the templates the organization can lease and their pools.
func (c *Client) Templates(ctx context.Context) (TemplateList, error) {
	var out TemplateList
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/templates", retry: true}, &out)
	return out, err
}

// Quotas lists each template's limit and live count.
func (c *Client) Quotas(ctx context.Context) ([]domain.QuotaEntry, error) {
	var out struct {
		Quotas []domain.QuotaEntry `json:"quotas"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/quotas", retry: true}, &out)
	return out.Quotas, err
}

// Usage reports usage from the UTC day of since (the zero time: the
// service's default, 30 days back) through today.
func (c *Client) Usage(ctx context.Context, since time.Time) (UsageReport, error) {
	v := url.Values{}
	if !since.IsZero() {
		v.Set("since", since.UTC().Format(time.DateOnly))
	}
	var out UsageReport
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/usage", query: v, retry: true}, &out)
	return out, err
}

// ListArtifacts reads one page of artifacts.
func (c *Client) ListArtifacts(ctx context.Context, q PageQuery) (ArtifactPage, error) {
	v := url.Values{}
	pageParams(v, q.Limit, q.Cursor)
	var out ArtifactPage
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/artifacts", query: v, retry: true}, &out)
	return out, err
}

// GetArtifact reads an artifact in any state but expired.
func (c *Client) GetArtifact(ctx context.Context, id string) (domain.Artifact, error) {
	var out domain.Artifact
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/artifacts/" + seg(id), retry: true}, &out)
	return out, err
}

// CreateLink signs a download link; expires is a duration ("2h") or an RFC
// 3339 time, empty for the service's default (1 hour). Nothing is stored,
// so it is retried.
func (c *Client) CreateLink(ctx context.Context, id, expires string) (domain.Link, error) {
	var body any
	if expires != "" {
		body = map[string]string{"expires": expires}
	}
	var out domain.Link
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/artifacts/" + seg(id) + "/links", body: body, retry: true}, &out)
	return out, err
}

func pageParams(v url.Values, limit int, cursor string) {
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
}

// seg escapes an id for use as one path segment, so an id can never reach
// another route.
func seg(id string) string { return url.PathEscape(id) }

// EnvironmentIdentity is what an environment's identity tokens say
// (GET /v1/environments/{id}/identity): never a token.
type EnvironmentIdentity struct {
	Issuer   string          `json:"issuer"`
	Lifetime domain.Duration `json:"lifetime"`
	Tokens   []IdentityToken `json:"tokens"`
}

// IdentityToken is one audience's token, described: its file inside the
// environment and the claims a token issued now carries.
type IdentityToken struct {
	Audience string         `json:"audience"`
	Path     string         `json:"path"`
	Claims   map[string]any `json:"claims"`
}

// GetEnvironmentIdentity reads the claims of an environment's identity.
func (c *Client) GetEnvironmentIdentity(ctx context.Context, id string) (EnvironmentIdentity, error) {
	var out EnvironmentIdentity
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(id) + "/identity", retry: true}, &out)
	return out, err
}
