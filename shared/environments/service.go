// Package environments leases environments from templates (POST
// /v1/environments), reads, lists, deletes and touches them. The rules live
// here; every write that must be exact under concurrency (the quota, the
// release, the idle deadline) is one conditional DynamoDB call in the store.
package environments

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/secrets"
)

// Store is what the environments service needs from persistence.
type Store interface {
	GetTemplate(ctx context.Context, org, name string) (domain.Template, error)
	GetArtifact(ctx context.Context, org, id string) (domain.Artifact, error)
	// GetSecrets finds the secrets a template binds (secrets.CheckBound).
	GetSecrets(ctx context.Context, org string, names []string) (map[string]domain.SealedSecret, error)
	LeaseEnvironment(ctx context.Context, l domain.Lease) error
	GetEnvironment(ctx context.Context, org, id string) (domain.Environment, error)
	ListEnvironments(ctx context.Context, org string, q domain.EnvQuery) (domain.EnvPage, error)
	StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error)
	TouchEnvironment(ctx context.Context, e domain.Environment, idleUntil time.Time) (domain.Environment, bool, error)
	GetIdempotency(ctx context.Context, org, key string, now time.Time) (*domain.IdempotencyRecord, error)
	// GetNode reads the node an environment runs on, for its tunnel URL and key.
	GetNode(ctx context.Context, org, id string) (domain.Node, error)
	UsageStore
	// PutEvent records an exec, which changes nothing else.
	PutEvent(ctx context.Context, ev domain.Event) error
	// SetEnvironmentPreviews keeps an environment's preview links.
	SetEnvironmentPreviews(ctx context.Context, e domain.Environment, ps []domain.Preview) (domain.Environment, bool, error)
	// GetOrg reads the organization, for its longest preview.
	GetOrg(ctx context.Context, id string) (domain.Org, error)
	// GetEnvMetrics reads an ended environment's kept metrics history.
	GetEnvMetrics(ctx context.Context, org, id string) ([]domain.MetricSample, error)
}

// Limits of a lease request and of listings.
const (
	// IdempotencyWindow is how long an Idempotency-Key is remembered.
	IdempotencyWindow = 24 * time.Hour
	// MaxShareFiles and MaxShareFileBytes bound the file names of all shares
	// of one lease, which are stored in the environment item: with every
	// other field at its own limit the item stays well under DynamoDB's
	// 400 KB (the idempotency record keeps no second copy of them).
	MaxShareFiles     = 500
	MaxShareFileBytes = 128 << 10
	// DefaultListLimit and MaxListLimit bound GET /v1/environments pages.
	DefaultListLimit = 50
	MaxListLimit     = 200
	// Listen ports of a sandbox are drawn from [PortLow, PortHigh).
	PortLow  = 20000
	PortHigh = 30000
	// DefaultTemplateTTL is how long a warm function reuses a template it read.
	DefaultTemplateTTL = 30 * time.Second
	// portAttempts bounds retries when a drawn listen port is already held.
	portAttempts = 8
)

// Service holds the leasing rules.
type Service struct {
	store Store
	clock clock.Clock

	// Templates change rarely (configuration is applied by an admin), and a
	// lease must cost the authentication read plus one transaction, so a warm
	// function keeps the templates it read for templateTTL. The quota limit
	// itself is not cached: the transaction reads it from the quota item.
	templateTTL time.Duration
	// offerer, when set, wakes a node of the pool after a lease.
	offerer Offerer
	// stopper, when set, tells a node that an environment it runs is
	// stopping.
	stopper Stopper
	// links, when set, signs the links of kept logs (logs.go).
	links Linker
	// changes, when set, wakes a wait as soon as its environment changes.
	changes   Watcher
	mu        sync.Mutex
	templates map[string]cachedTemplate
	// images are sealed image artifacts of container templates, kept like
	// templates: a sealed artifact never changes, and its expiry is compared
	// to now at every lease.
	images map[string]cachedImage
	// settings are organizations' usage groupings, kept like templates (usage.go).
	settings map[string]cachedSettings
	// previews configure preview links (preview.go).
	previews PreviewOptions
	// nodeHTTP reaches nodes' endpoints (metrics_recent.go).
	nodeHTTP *http.Client
}

type cachedImage struct {
	a       domain.Artifact
	fetched time.Time
}

type cachedTemplate struct {
	t       domain.Template
	fetched time.Time
}

// Option configures the service.
type Option func(*Service)

// WithTemplateTTL sets how long a read template is reused; 0 reads it on every lease.
func WithTemplateTTL(d time.Duration) Option { return func(s *Service) { s.templateTTL = d } }

// NewService returns the environments service.
func NewService(st Store, clk clock.Clock, opts ...Option) *Service {
	s := &Service{store: st, clock: clk, templateTTL: DefaultTemplateTTL, templates: map[string]cachedTemplate{},
		images: map[string]cachedImage{}, settings: map[string]cachedSettings{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// LeaseRequest is the body of POST /v1/environments.
type LeaseRequest struct {
	Template string            `json:"template"`
	Name     string            `json:"name"`
	Labels   map[string]string `json:"labels"`
	Project  string            `json:"project"`
	Pool     string            `json:"pool"`
	Sandbox  string            `json:"sandbox"`
	Shares   []ShareRequest    `json:"shares"`
	Snapshot string            `json:"snapshot"`
	Idle     string            `json:"idle"`
	Hard     string            `json:"hard"`
	// Network narrows the template's network policy for this environment
	// (domain.EnvNetwork); absent: the template's alone.
	Network *domain.EnvNetwork `json:"network,omitempty"`
}

// ShareRequest asks for a template share to be filled from a local folder.
type ShareRequest struct {
	Name      string   `json:"name"`
	LocalPath string   `json:"localPath"`
	Files     []string `json:"files"`
	// Artifact is a sealed tar.zst of the folder's files (the client packs
	// and uploads it) that the node unpacks at the share's path.
	Artifact string `json:"artifact"`
}

// Leased is the body of a successful lease.
type Leased struct {
	Environment domain.Environment   `json:"environment"`
	Config      domain.SandboxConfig `json:"config"`
}

// LeaseResult is the response of a lease: the body to send with 201, and
// whether it is the stored answer to an earlier request with the same key.
type LeaseResult struct {
	Body     []byte
	Replayed bool
}

// Lease leases an environment. With an Idempotency-Key, a retry of the same
// request within 24 h gets the first response and leases nothing; the same
// key with another request is 422.
func (s *Service) Lease(ctx context.Context, p domain.Principal, req LeaseRequest, idemKey string) (LeaseResult, error) {
	// A restricted token's limits travel on its principal: no read.
	if err := p.Restrictions.CheckLease(req.Template, req.Project, req.Labels); err != nil {
		return LeaseResult{}, err
	}
	var reqHash string
	if idemKey != "" {
		if err := validateIdempotencyKey(idemKey); err != nil {
			return LeaseResult{}, err
		}
		reqHash = requestHash(req)
	}
	for attempt := 0; ; attempt++ {
		body, err := s.lease(ctx, p, req, idemKey, reqHash)
		if err == nil {
			return LeaseResult{Body: body}, nil
		}
		if idemKey == "" || !replayable(err) {
			return LeaseResult{}, err
		}
		// The key may have been used before: then the first answer stands,
		// whatever this attempt ran into (a full quota, for one).
		rec, rerr := s.store.GetIdempotency(ctx, p.OrgID, idemKey, s.clock.Now())
		if rerr != nil {
			return LeaseResult{}, rerr
		}
		if rec != nil {
			if rec.RequestHash != reqHash {
				return LeaseResult{}, domain.Invalid("Idempotency-Key",
					"this Idempotency-Key was used within the last 24 hours with a different request; use a new key for a new request")
			}
			body, err := s.replayBody(ctx, p.OrgID, rec.Body)
			if err != nil {
				return LeaseResult{}, err
			}
			return LeaseResult{Body: body, Replayed: true}, nil
		}
		// The record expired between the transaction and the read: lease anew, once.
		if !errors.Is(err, domain.ErrIdempotencyKeyUsed) || attempt > 0 {
			if errors.Is(err, domain.ErrIdempotencyKeyUsed) {
				return LeaseResult{}, domain.Errorf(domain.CodeConflict, "the Idempotency-Key is in use by a concurrent request; retry")
			}
			return LeaseResult{}, err
		}
	}
}

// withoutShareFiles is l with every share's file list emptied (nil).
func withoutShareFiles(l Leased) Leased {
	strip := func(in []domain.EnvShare) []domain.EnvShare {
		out := make([]domain.EnvShare, len(in))
		for i, sh := range in {
			sh.Files = nil
			out[i] = sh
		}
		return out
	}
	l.Environment.Shares = strip(l.Environment.Shares)
	l.Config.Shares = strip(l.Config.Shares)
	return l
}

// replayBody rebuilds the first answer from a stored, slim one: the share
// file names come back from the environment item (one read, on replays with
// shares only). The environment's shares are fixed at lease, so the answer is
// the one first given, byte for byte.
func (s *Service) replayBody(ctx context.Context, org string, stored []byte) ([]byte, error) {
	var l Leased
	if err := json.Unmarshal(stored, &l); err != nil {
		return nil, domain.Internal(fmt.Errorf("decode idempotency record: %w", err))
	}
	if len(l.Environment.Shares) == 0 {
		return stored, nil
	}
	e, err := s.store.GetEnvironment(ctx, org, l.Environment.ID)
	if err != nil {
		return nil, err
	}
	if len(e.Shares) != len(l.Environment.Shares) {
		return nil, domain.Internal(fmt.Errorf("environment %s has %d shares, its lease answered %d", e.ID, len(e.Shares), len(l.Environment.Shares)))
	}
	for i := range l.Environment.Shares {
		l.Environment.Shares[i].Files = e.Shares[i].Files
	}
	l.Config.Shares = l.Environment.Shares
	return encode(l)
}

func replayable(err error) bool {
	if errors.Is(err, domain.ErrIdempotencyKeyUsed) {
		return true
	}
	switch domain.ErrorCode(err) {
	case domain.CodeInvalid, domain.CodeQuota, domain.CodeBudget, domain.CodeBadRequest:
		return true
	}
	return false
}

func validateIdempotencyKey(k string) error {
	if len(k) > 255 {
		return domain.BadRequest("Idempotency-Key", "the Idempotency-Key header must be at most 255 characters")
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] >= 0x7f {
			return domain.BadRequest("Idempotency-Key", "the Idempotency-Key header must be printable ASCII without spaces")
		}
	}
	return nil
}

// requestHash is the SHA-256 of the request in canonical JSON (the decoded
// struct re-encoded: field order, whitespace and absent-versus-empty
// collections do not matter).
func requestHash(req LeaseRequest) string {
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	if req.Shares == nil {
		req.Shares = []ShareRequest{}
	}
	for i := range req.Shares {
		if req.Shares[i].Files == nil {
			req.Shares[i].Files = []string{}
		}
	}
	b, _ := json.Marshal(req) // plain strings, maps and slices always encode
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (s *Service) lease(ctx context.Context, p domain.Principal, req LeaseRequest, idemKey, reqHash string) ([]byte, error) {
	now := s.clock.Now()
	e, err := s.newEnvironment(ctx, p, req, now)
	if err != nil {
		return nil, err
	}
	exports := e.Exports
	for attempt := 1; ; attempt++ {
		e.Exports, e.Ports = allocate(exports, e.Sandbox)
		leased := Leased{Environment: e, Config: domain.ConfigFor(e)}
		body, err := encode(leased)
		if err != nil {
			return nil, err
		}
		l := domain.Lease{Env: e}
		if err := s.withUsage(ctx, &l, now); err != nil {
			return nil, err
		}
		if idemKey != "" {
			// The record keeps the answer without the share file names, which
			// the environment item already holds and never changes: a replay
			// puts them back (replayBody), and the record stays small.
			slim, err := encode(withoutShareFiles(leased))
			if err != nil {
				return nil, err
			}
			l.Idempotency = &domain.IdempotencyRecord{
				OrgID: p.OrgID, Key: idemKey, RequestHash: reqHash, Status: 201, Body: slim,
				Created: now, Expires: now.Add(IdempotencyWindow),
			}
		}
		err = s.store.LeaseEnvironment(ctx, l)
		if errors.Is(err, domain.ErrListenPortTaken) && attempt < portAttempts {
			continue
		}
		if errors.Is(err, domain.ErrListenPortTaken) {
			return nil, domain.Errorf(domain.CodeConflict, "no free listen port was found on sandbox %s; retry", e.Sandbox)
		}
		if err != nil {
			return nil, err
		}
		if s.offerer != nil {
			// The lease is committed: its offer must neither die with a
			// caller who hung up nor hold the answer long if posting to
			// nodes is slow. An offer cut short is sent again by the
			// re-offer job.
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offerTimeout)
			s.offerer.Offer(octx, e)
			cancel()
		}
		return body, nil
	}
}

func encode(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, domain.Internal(fmt.Errorf("encode lease: %w", err))
	}
	return []byte(b.String()), nil
}

// newEnvironment applies every 422 rule of a lease request and builds the
// pending environment, exports without listen addresses yet.
func (s *Service) newEnvironment(ctx context.Context, p domain.Principal, req LeaseRequest, now time.Time) (domain.Environment, error) {
	if req.Template == "" {
		return domain.Environment{}, domain.Invalid("template", "template is required")
	}
	t, err := s.template(ctx, p.OrgID, req.Template, now)
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return domain.Environment{}, domain.Invalid("template", "unknown template %q", req.Template)
	}
	if err != nil {
		return domain.Environment{}, err
	}
	if err := s.usableImage(ctx, p.OrgID, t, now); err != nil {
		return domain.Environment{}, err
	}
	// A template that binds a secret not set is refused now (422 naming
	// it), not failed on the node; one read, none for templates that bind
	// none.
	if err := secrets.CheckBound(ctx, s.store, p.OrgID, t); err != nil {
		return domain.Environment{}, err
	}
	if err := domain.ValidateText("name", req.Name, 100); err != nil {
		return domain.Environment{}, err
	}
	if err := domain.ValidateText("project", req.Project, 200); err != nil {
		return domain.Environment{}, err
	}
	if err := domain.ValidateLabels(req.Labels); err != nil {
		return domain.Environment{}, err
	}
	pool := req.Pool
	switch {
	case pool == "" && len(t.Pools) == 0:
		return domain.Environment{}, domain.Invalid("template", "template %q is not run by any pool", t.Name)
	case pool == "":
		pool = t.Pools[0]
	case !slices.Contains(t.Pools, pool):
		return domain.Environment{}, domain.Invalid("pool", "pool %q does not run template %q; it runs in: %s", pool, t.Name, strings.Join(t.Pools, ", "))
	}
	if err := domain.ValidateText("sandbox", req.Sandbox, 100); err != nil {
		return domain.Environment{}, err
	}
	idle, err := timeout("idle", req.Idle, t.Timeouts.Idle)
	if err != nil {
		return domain.Environment{}, err
	}
	hard, err := timeout("hard", req.Hard, t.Timeouts.Hard)
	if err != nil {
		return domain.Environment{}, err
	}
	shares, err := buildShares(t, req.Shares)
	if err != nil {
		return domain.Environment{}, err
	}
	if req.Snapshot != "" {
		if err := s.usableArtifact(ctx, p.OrgID, "snapshot", "snapshot", req.Snapshot, now); err != nil {
			return domain.Environment{}, err
		}
	}
	for i, sh := range shares {
		if sh.Artifact == "" {
			continue
		}
		field := fmt.Sprintf("shares[%d].artifact", i)
		if err := s.usableArtifact(ctx, p.OrgID, field, field, sh.Artifact, now); err != nil {
			return domain.Environment{}, err
		}
	}
	var network *domain.EnvNetwork
	if req.Network != nil {
		if err := domain.ValidateEnvNetwork("network", t, *req.Network); err != nil {
			return domain.Environment{}, err
		}
		n := req.Network.Normalized()
		n.Version = 0 // the lease's layer; only the service sets versions
		network = &n
	}
	name := req.Name
	if name == "" {
		name = t.Name
	}
	expires := now.Add(hard.Std())
	idleUntil := now.Add(idle.Std())
	if idleUntil.After(expires) {
		idleUntil = expires
	}
	e := domain.Environment{
		OrgID: p.OrgID, ID: domain.SortableID("env_", now), Name: name, Template: t.Name,
		State: domain.StatePending, Version: 1, Sandbox: req.Sandbox, Pool: pool, Labels: req.Labels, Project: req.Project,
		CreatedBy: p.Actor(), Created: now, Expires: expires, IdleUntil: idleUntil, Idle: idle, Hard: hard,
		Shares: shares, Snapshot: req.Snapshot, Needs: domain.NeedsOf(t), Network: network,
		Identity: t.Identity,
	}
	if t.IdleAction() == domain.IdlePause {
		e.OnIdle, e.Retention = domain.IdlePause, t.PauseRetention()
	}
	services := make([]string, 0, len(t.Exports))
	for svc := range t.Exports {
		services = append(services, svc)
	}
	sort.Strings(services)
	for _, svc := range services {
		e.Exports = append(e.Exports, domain.EnvExport{Service: svc})
	}
	e.Normalize()
	return e, nil
}

// usableArtifact checks that id (a lease's snapshot, a share's files) is a
// sealed, unexpired artifact of the organization; what names it in the 422.
func (s *Service) usableArtifact(ctx context.Context, org, field, what, id string, now time.Time) error {
	if err := domain.ValidateText(field, id, 100); err != nil {
		return err
	}
	a, err := s.store.GetArtifact(ctx, org, id)
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return domain.Invalid(field, "unknown %s %q: it must be an artifact of your organization", what, id)
	}
	if err != nil {
		return err
	}
	if !a.UsableAt(now) {
		return domain.Invalid(field, "%s %q is not a sealed, unexpired artifact", what, id)
	}
	return nil
}

// timeout reads a requested idle or hard duration: the template's when
// absent, otherwise positive and at most the template's.
func timeout(field, v string, max domain.Duration) (domain.Duration, error) {
	if v == "" {
		return max, nil
	}
	d, err := domain.ParseDuration(v)
	if err != nil {
		return 0, domain.Invalid(field, "%s: %v", field, err)
	}
	if d <= 0 {
		return 0, domain.Invalid(field, "%s must be positive", field)
	}
	if d > max {
		return 0, domain.Invalid(field, "%s %s is beyond the template's limit of %s", field, d, max)
	}
	return d, nil
}

// buildShares turns requested shares into the environment's: names from the
// template, files filtered through the template share's exclude patterns.
func buildShares(t domain.Template, reqs []ShareRequest) ([]domain.EnvShare, error) {
	out := []domain.EnvShare{}
	seen := map[string]bool{}
	total, totalBytes := 0, 0
	for i, r := range reqs {
		field := fmt.Sprintf("shares[%d]", i)
		idx := slices.IndexFunc(t.Shares, func(ts domain.TemplateShare) bool { return ts.Name == r.Name })
		if idx < 0 {
			names := make([]string, 0, len(t.Shares))
			for _, ts := range t.Shares {
				names = append(names, ts.Name)
			}
			return nil, domain.Invalid(field+".name", "template %q has no share %q (its shares: %s)", t.Name, r.Name, strings.Join(names, ", "))
		}
		if seen[r.Name] {
			return nil, domain.Invalid(field+".name", "%s.name: share %q is given twice", field, r.Name)
		}
		seen[r.Name] = true
		if err := domain.ValidateText(field+".localPath", r.LocalPath, 4096); err != nil {
			return nil, err
		}
		total += len(r.Files)
		if total > MaxShareFiles {
			return nil, domain.Invalid(field+".files", "at most %d files may be shared per environment", MaxShareFiles)
		}
		for _, f := range r.Files {
			totalBytes += len(f)
		}
		if totalBytes > MaxShareFileBytes {
			return nil, domain.Invalid(field+".files", "the file names of all shares may add up to at most %d bytes per environment", MaxShareFileBytes)
		}
		ts := t.Shares[idx]
		files := []string{}
		for j, f := range r.Files {
			ff := fmt.Sprintf("%s.files[%d]", field, j)
			if err := validateSharePath(ff, f); err != nil {
				return nil, err
			}
			if !domain.Excluded(ts.Exclude, f) {
				files = append(files, f)
			}
		}
		dir := ts.Direction
		if dir == "" {
			dir = "in"
		}
		out = append(out, domain.EnvShare{Name: ts.Name, Direction: dir, EnvPath: ts.Path, LocalPath: r.LocalPath, Files: files, Artifact: r.Artifact})
	}
	return out, nil
}

// validateSharePath accepts a relative, slash-separated path inside the share.
func validateSharePath(field, f string) error {
	if err := domain.ValidateText(field, f, 1024); err != nil {
		return err
	}
	if f == "" || strings.HasPrefix(f, "/") || strings.Contains(f, "\\") {
		return domain.Invalid(field, "%s must be a relative slash-separated path", field)
	}
	for _, part := range strings.Split(f, "/") {
		if part == ".." {
			return domain.Invalid(field, "%s must stay inside the share (no ..)", field)
		}
	}
	return nil
}

// allocate gives each export a listen address on the sandbox. Ports are drawn
// at random from [PortLow, PortHigh); uniqueness among the sandbox's live
// environments is not left to chance: the lease transaction claims each port
// with a conditional put (ORG#<org> SBXPORT#<sandbox>#<port>), a taken port
// cancels it and the lease draws again, and the stop transaction frees them.
// Without a sandbox there is nothing to listen on, so listen stays empty.
func allocate(exports []domain.EnvExport, sandbox string) ([]domain.EnvExport, []int) {
	out := make([]domain.EnvExport, len(exports))
	copy(out, exports)
	if sandbox == "" {
		return out, nil
	}
	var ports []int
	used := map[int]bool{}
	for i := range out {
		p := randomPort()
		for used[p] {
			p = randomPort()
		}
		used[p] = true
		ports = append(ports, p)
		out[i].Listen = fmt.Sprintf("127.0.0.1:%d", p)
		out[i].Target = ""
	}
	return out, ports
}

func randomPort() int {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return PortLow + int(binary.BigEndian.Uint32(b[:])%uint32(PortHigh-PortLow))
}

// template reads a template, reusing a recent read. Unknown templates are not
// remembered, so a newly configured one can be leased at once.
func (s *Service) template(ctx context.Context, org, name string, now time.Time) (domain.Template, error) {
	k := org + "\x00" + name
	s.mu.Lock()
	c, ok := s.templates[k]
	s.mu.Unlock()
	if ok && now.Sub(c.fetched) < s.templateTTL && !now.Before(c.fetched) {
		return c.t, nil
	}
	t, err := s.store.GetTemplate(ctx, org, name)
	if err != nil {
		return domain.Template{}, err
	}
	if s.templateTTL > 0 {
		s.mu.Lock()
		s.templates[k] = cachedTemplate{t: t, fetched: now}
		s.mu.Unlock()
	}
	return t, nil
}

// usableImage checks, for a container template whose image is an artifact,
// that the artifact is a sealed, unexpired artifact of the organization: a
// lease that no node could start is refused now (422 on "template", naming
// the image) rather than failed on the node. The record is cached for
// templateTTL, so a burst of leases of the template reads it once; one
// deleted meanwhile fails the environment at claim with the same words.
func (s *Service) usableImage(ctx context.Context, org string, t domain.Template, now time.Time) error {
	if t.Image == nil || t.Image.Artifact == "" {
		return nil
	}
	id := t.Image.Artifact
	k := org + "\x00" + id
	s.mu.Lock()
	c, ok := s.images[k]
	s.mu.Unlock()
	if !ok || now.Sub(c.fetched) >= s.templateTTL || now.Before(c.fetched) {
		a, err := s.store.GetArtifact(ctx, org, id)
		if domain.ErrorCode(err) == domain.CodeNotFound {
			return domain.Invalid("template", "template %q cannot be leased: its image.artifact %q is not an artifact of your organization", t.Name, id)
		}
		if err != nil {
			return err
		}
		c = cachedImage{a: a, fetched: now}
		if s.templateTTL > 0 && a.State == domain.ArtifactSealed {
			s.mu.Lock()
			s.images[k] = c
			s.mu.Unlock()
		}
	}
	if !c.a.UsableAt(now) {
		return domain.Invalid("template", "template %q cannot be leased: its image.artifact %q is not a sealed, unexpired artifact (state %s)", t.Name, id, c.a.State)
	}
	return nil
}

// Get returns one environment of the caller's organization, in any state. A
// stopped or failed record past its keeping (domain.EnvRecordKept) is not
// found, whether or not DynamoDB TTL has deleted it yet.
func (s *Service) Get(ctx context.Context, p domain.Principal, id string) (domain.Environment, error) {
	if !validID(id) {
		return domain.Environment{}, domain.NotFound("environment")
	}
	e, err := s.store.GetEnvironment(ctx, p.OrgID, id)
	if err == nil && e.Purged(s.clock.Now()) {
		return domain.Environment{}, domain.NotFound("environment")
	}
	return e, err
}

// getActing is Get for a request that acts on the environment: a token's
// restrictions reach only environments it could have leased.
func (s *Service) getActing(ctx context.Context, p domain.Principal, id string) (domain.Environment, error) {
	e, err := s.Get(ctx, p, id)
	if err == nil {
		err = p.Restrictions.CheckEnv(e)
	}
	return e, err
}

func validID(id string) bool {
	return strings.HasPrefix(id, "env_") && len(id) <= 64 && !strings.ContainsAny(id, "#/ ")
}

// List returns a page of environments: live ones by default, newest first.
func (s *Service) List(ctx context.Context, p domain.Principal, q domain.EnvQuery) (domain.EnvPage, error) {
	if q.State != "" && q.State != "live" && !domain.State(q.State).Valid() {
		return domain.EnvPage{}, domain.BadRequest("state", "state must be live or one of pending, starting, ready, stopping, stopped, failed, paused")
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return domain.EnvPage{}, domain.BadRequest("limit", "limit must be between 1 and %d", MaxListLimit)
	}
	page, err := s.store.ListEnvironments(ctx, p.OrgID, q)
	if err != nil {
		return page, err
	}
	// Records past their keeping are left out, as Get does; the page may
	// then be shorter than the limit, and `next` still goes on from its end.
	now := s.clock.Now()
	kept := page.Environments[:0]
	for _, e := range page.Environments {
		if !e.Purged(now) {
			kept = append(kept, e)
		}
	}
	page.Environments = kept
	return page, nil
}

// Delete ends a lease and releases its quota at once. A pending environment
// is stopped; one a node runs goes to stopping and the node tears it down.
// Deleting an environment that is no longer live changes nothing and returns
// it as it is, so a retried DELETE is harmless.
func (s *Service) Delete(ctx context.Context, p domain.Principal, id string) (domain.Environment, error) {
	e, err := s.getActing(ctx, p, id)
	if err == nil && e.State == domain.StatePaused {
		return s.endPaused(ctx, e) // with its checkpoint (pause.go)
	}
	// A stop refused because the record changed since it was read (a touch,
	// a node's report) comes back with the current record: decide again.
	for attempt := 0; err == nil && e.State.Live(); attempt++ {
		if attempt == 5 {
			return domain.Environment{}, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast to delete; retry", id)
		}
		to := domain.StateStopped
		if e.Node != "" && (e.State == domain.StateStarting || e.State == domain.StateReady) {
			to = domain.StateStopping
		}
		var stopped bool
		e, stopped, err = s.store.StopEnvironment(ctx, e, to, domain.StopDeleted, s.clock.Now())
		if stopped {
			if err == nil && s.stopper != nil && e.State == domain.StateStopping {
				// As an offer: committed, so neither cut short by a caller
				// who hung up nor holding the answer long.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offerTimeout)
				s.stopper.Stop(sctx, e)
				cancel()
			}
			return e, err
		}
	}
	return e, err
}

// Touch moves idleUntil to now + idle, never past expires and never
// backwards. A stopped, stopping or failed environment, or one whose deadline
// has passed (the timeout job is about to stop it), is 410.
func (s *Service) Touch(ctx context.Context, p domain.Principal, id string) (domain.Environment, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil {
		return e, err
	}
	if e.State == domain.StatePaused {
		// A touch is use: it wakes a paused environment (pause.go), whose
		// idle deadline then runs from now.
		return s.wake(ctx, e)
	}
	now := s.clock.Now()
	if err := touchable(e, now); err != nil {
		return domain.Environment{}, err
	}
	next := now.Add(e.Idle.Std())
	if next.After(e.Expires) {
		next = e.Expires
	}
	if !next.After(e.IdleUntil) {
		return e, nil // never backwards: the deadline already reaches as far
	}
	after, _, err := s.store.TouchEnvironment(ctx, e, next)
	if err != nil {
		return domain.Environment{}, err
	}
	// Not moved means a concurrent stop or a later touch won; say which.
	if !after.State.Live() {
		return domain.Environment{}, gone(after)
	}
	return after, nil
}

func touchable(e domain.Environment, now time.Time) error {
	if !e.State.Live() {
		return gone(e)
	}
	if c := e.Checkpoint; c != nil && c.Pause && !c.Done() && now.Before(e.Expires) {
		// Idle and being paused: a touch is use, and keeps it running (its
		// pause is not made once the checkpoint ends, nodes/pause.go).
		return nil
	}
	if !now.Before(e.Due()) {
		return domain.Errorf(domain.CodeGone, "environment %s timed out at %s and is being stopped; lease a new one",
			e.ID, e.Due().Format(time.RFC3339))
	}
	return nil
}

func gone(e domain.Environment) error {
	return domain.Errorf(domain.CodeGone, "environment %s is %s; lease a new one", e.ID, e.State)
}
