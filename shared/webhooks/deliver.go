package webhooks

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/sweep"
)

// The delivery job works through the outbox's due index (store.DueOutbox,
// store.DueShards partitions). An entry is either an event, which it fans
// out (one transaction: the event leaves the outbox, one delivery per
// webhook that wants it is created, due at once), or a delivery, which it
// POSTs and records. Nothing here runs inside a request: a slow or dead
// receiver costs this job time, never a lease; and an event or a delivery
// leaves the index only by a write that records what became of it, so a
// receiver that is down, or a job that dies midway, loses nothing.

// Backoff: an attempt that fails is tried again after FirstRetry, doubling
// each time up to MaxRetryGap, for RetryWindow from the delivery's creation
// (or its retry by hand). Past that the delivery has failed and its webhook
// is disabled, with a webhook.disabled event.
const (
	FirstRetry  = 30 * time.Second
	MaxRetryGap = 4 * time.Hour
	RetryWindow = 24 * time.Hour
)

// NextGap is the wait after the n-th failed attempt (n from 1).
func NextGap(n int) time.Duration {
	d := FirstRetry
	for i := 1; i < n && d < MaxRetryGap; i++ {
		d *= 2
	}
	return min(d, MaxRetryGap)
}

// Options tune a run of the job.
type Options struct {
	// Guard checks each dialed address; AllowLocal only on a local stack.
	Guard Guard
	// TLS is the client's TLS configuration (nil: the system's roots). Tests
	// give the root of their httptest.NewTLSServer.
	TLS *tls.Config
	// Timeout bounds one POST, answer included (default 10 s).
	Timeout time.Duration
	// Parallel bounds the POSTs in flight over the whole run (default 64: a
	// run at the target rate must keep hundreds of POSTs a second going).
	Parallel int
	// PerWebhook bounds the POSTs in flight to one webhook (default 2), so
	// that one organization's slow or dead receiver holds at most that many
	// of the shared Parallel.
	PerWebhook int
	// Reserve is the time kept free before the context's deadline: no POST,
	// fan-out or page is started after that (default Timeout + 5 s, so a POST
	// started just before is answered or timed out, and recorded, in time).
	Reserve time.Duration
	// BudgetClock measures the budget (real time if nil; tests pass a fake
	// clock they move on).
	BudgetClock clock.Clock
	// Page is how many due index entries are read at a time (default 50).
	Page int
	// MaxQueue bounds the POSTs one page queues (default 4 x Page): the
	// deliveries past it stay due, for a later page or run.
	MaxQueue int
	// ShardWorkers is how many outbox shards are worked at once (default 8),
	// and FanOutWorkers how many fan-outs of one page at once (default 4):
	// 32 DynamoDB writes in flight, as the other jobs keep.
	ShardWorkers  int
	FanOutWorkers int
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 64
	}
	if o.PerWebhook <= 0 {
		o.PerWebhook = 2
	}
	if o.Reserve <= 0 {
		o.Reserve = o.Timeout + 5*time.Second
	}
	if o.Page <= 0 {
		o.Page = 50
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 4 * o.Page
	}
	if o.ShardWorkers <= 0 {
		o.ShardWorkers = 8
	}
	if o.FanOutWorkers <= 0 {
		o.FanOutWorkers = 4
	}
	return o
}

// Summary is what one run did.
type Summary struct {
	FannedOut int `json:"fannedOut"`
	Created   int `json:"deliveriesCreated"`
	Succeeded int `json:"succeeded"`
	Retrying  int `json:"retrying"`
	Failed    int `json:"failed"`
	// Held were recorded, not sent, because their webhook is disabled.
	Held     int `json:"held"`
	Disabled int `json:"webhooksDisabled"`
	// Deferred deliveries were due but left for a later run: the budget was
	// spent, the page queued its most, or their receiver gave no answer to
	// an attempt of this run already.
	Deferred  int  `json:"deferred"`
	OutOfTime bool `json:"outOfTime"`
	// Pages is how many index pages the run read over all shards.
	Pages int `json:"pages"`
}

// Job delivers events to webhooks.
type Job struct {
	store  Store
	clock  clock.Clock
	log    *slog.Logger
	opts   Options
	client *http.Client
}

// NewJob returns the delivery job.
func NewJob(st Store, clk clock.Clock, log *slog.Logger, opts Options) *Job {
	opts = opts.withDefaults()
	return &Job{store: st, clock: clk, log: log, opts: opts, client: opts.Guard.Client(opts.Timeout, opts.TLS)}
}

// run is the state of one run, shared by its shard workers.
type run struct {
	budget sweep.Budget
	now    time.Time
	posts  chan struct{} // Parallel slots

	mu      sync.Mutex
	perHook map[string]chan struct{} // webhook -> its PerWebhook slots
	silent  map[string]int           // webhook -> attempts of this run without an answer
	sum     Summary
	errs    []error
}

func (r *run) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *run) count(f func(s *Summary)) {
	r.mu.Lock()
	f(&r.sum)
	r.mu.Unlock()
}

// spent reports whether the run must start nothing more.
func (r *run) spent(ctx context.Context) bool {
	if ctx.Err() == nil && !r.budget.Spent() {
		return false
	}
	r.count(func(s *Summary) { s.OutOfTime = true })
	return true
}

// isSilent reports whether hook's receiver gave no answer to an attempt of
// this run: its other deliveries wait for the next run (at most the
// PerWebhook attempts in flight then went unanswered).
func (r *run) isSilent(hook string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.silent[hook] > 0
}

func (r *run) hookSlots(hook string, n int) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.perHook[hook]
	if !ok {
		c = make(chan struct{}, n)
		r.perHook[hook] = c
	}
	return c
}

// page is the state of one index page: the webhooks of each organization it
// meets, read once per page (after the page's index query), so a webhook
// created before an event was written is never missed for a stale read.
type page struct {
	mu    sync.Mutex
	hooks map[string][]domain.Webhook
}

// Run works through the outbox's shards, several at once and in a random
// order (sweep.Each), each page by page with the index's cursor, until
// nothing due is left or the run's budget is spent. What it does not reach
// stays due for the next run. It is safe to run concurrently with itself:
// every action is a conditional write.
func (j *Job) Run(ctx context.Context) (Summary, error) {
	r := &run{
		budget: sweep.NewBudget(ctx, j.opts.BudgetClock, j.opts.Reserve), now: j.clock.Now(),
		posts: make(chan struct{}, j.opts.Parallel), perHook: map[string]chan struct{}{}, silent: map[string]int{},
	}
	parts := make([]string, j.store.OutboxShards())
	for i := range parts {
		parts[i] = strconv.Itoa(i)
	}
	sweep.Each(ctx, parts, j.opts.ShardWorkers, func(ctx context.Context, part string) {
		n, _ := strconv.Atoi(part)
		j.shard(ctx, r, n)
	})
	return r.sum, errors.Join(r.errs...)
}

// shard works one outbox shard. It pages on with the cursor whatever a page
// held: entries already handled (the index lags) and entries whose handling
// failed are passed over, and stay due (if they are) for the next run.
func (j *Job) shard(ctx context.Context, r *run, shard int) {
	for cursor := ""; ; {
		if r.spent(ctx) {
			return
		}
		due, next, err := j.store.DueOutbox(ctx, shard, r.now, j.opts.Page, cursor)
		if err != nil {
			r.fail(fmt.Errorf("read outbox shard %d: %w", shard, err))
			return
		}
		r.count(func(s *Summary) { s.Pages++ })
		j.work(ctx, r, due)
		if next == "" {
			return
		}
		cursor = next
	}
}

// work handles one page: its events are fanned out FanOutWorkers at once,
// then its deliveries and those just created are POSTed, at most MaxQueue
// of them, each waiting for a slot of its webhook and then one of the run.
func (j *Job) work(ctx context.Context, r *run, due []domain.OutboxEntry) {
	pg := &page{hooks: map[string][]domain.Webhook{}}
	var (
		mu     sync.Mutex
		todo   []task
		events []domain.Event
	)
	for _, e := range due {
		if e.Event != nil {
			events = append(events, *e.Event)
		} else {
			todo = append(todo, task{*e.Delivery, true})
		}
	}
	each(events, j.opts.FanOutWorkers, func(ev domain.Event) {
		if r.spent(ctx) {
			return // still in the outbox
		}
		created, err := j.fanOut(ctx, r, pg, ev)
		if err != nil {
			r.fail(err)
			return
		}
		mu.Lock()
		// Tried at once, whatever shard they are indexed in (due for other
		// runs only at holdUntil).
		for _, d := range created {
			todo = append(todo, task{d, false})
		}
		mu.Unlock()
	})
	if len(todo) > j.opts.MaxQueue {
		n := len(todo) - j.opts.MaxQueue
		r.count(func(s *Summary) { s.Deferred += n })
		todo = todo[:j.opts.MaxQueue]
	}
	var wg sync.WaitGroup
	for _, tk := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.attempt(ctx, r, pg, tk)
		}()
	}
	wg.Wait()
}

// task is a delivery to try. One read from the due index is claimed before
// its POST (another run may have read it too); one this run's fan-out
// created is reserved for it already (due only at holdUntil).
type task struct {
	d     domain.Delivery
	claim bool
}

// attempt tries d once, if the run still may: it holds one of its webhook's
// slots, then one of the run's, and checks the budget and its receiver just
// before the POST.
func (j *Job) attempt(ctx context.Context, r *run, pg *page, tk task) {
	d := tk.d
	mine := r.hookSlots(d.Webhook, j.opts.PerWebhook)
	mine <- struct{}{}
	defer func() { <-mine }()
	if r.isSilent(d.Webhook) {
		r.count(func(s *Summary) { s.Deferred++ })
		return
	}
	r.posts <- struct{}{}
	defer func() { <-r.posts }()
	// Both again once the run's slot is had: the wait for it may be long,
	// and meanwhile the budget may be spent, or the attempt in flight to the
	// same receiver may have gone unanswered.
	if r.spent(ctx) || r.isSilent(d.Webhook) {
		r.count(func(s *Summary) { s.Deferred++ })
		return
	}
	if err := j.deliver(ctx, r, pg, d, tk.claim); err != nil {
		r.fail(err)
	}
}

// each calls fn for every item, up to n at once.
func each[T any](items []T, n int, fn func(T)) {
	sem := make(chan struct{}, max(1, n))
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(it)
		}()
	}
	wg.Wait()
}

func (j *Job) webhooks(ctx context.Context, pg *page, org string) ([]domain.Webhook, error) {
	pg.mu.Lock()
	hs, ok := pg.hooks[org]
	pg.mu.Unlock()
	if ok {
		return hs, nil
	}
	hs, err := j.store.ListWebhooks(ctx, org)
	if err != nil {
		return nil, err
	}
	pg.mu.Lock()
	pg.hooks[org] = hs
	pg.mu.Unlock()
	return hs, nil
}

// fanOut creates the event's deliveries and takes it out of the outbox. A
// disabled webhook that wants the event gets its delivery held, to be sent
// once it is enabled again. It returns the deliveries to try now.
func (j *Job) fanOut(ctx context.Context, r *run, pg *page, ev domain.Event) ([]domain.Delivery, error) {
	hooks, err := j.webhooks(ctx, pg, ev.OrgID)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, domain.Internal(err)
	}
	now := j.clock.Now()
	hold := j.holdUntil(ctx, now)
	var ds, send []domain.Delivery
	held := 0
	for _, h := range hooks {
		// A webhook gets what happened from its creation on, not the
		// outbox's backlog, and nothing after it expires.
		if !h.Receives(ev.Type, ev.Time) {
			continue
		}
		d := domain.Delivery{
			ID: store.DeliveryID(ev.ID), Webhook: h.ID, Event: ev.ID, Type: ev.Type, State: domain.DeliveryPending,
			Created: now, NextTry: &hold, Attempts: []domain.Attempt{}, OrgID: ev.OrgID, Body: body,
		}
		if h.State != domain.WebhookEnabled {
			d.State, d.NextTry, held = domain.DeliveryHeld, nil, held+1
		} else {
			send = append(send, d)
		}
		ds = append(ds, d)
	}
	ok, err := j.store.FanOut(ctx, ev, ds)
	if err != nil || !ok {
		return nil, err
	}
	r.count(func(s *Summary) {
		s.FannedOut++
		s.Created += len(ds)
		s.Held += held
	})
	return send, nil
}

// holdUntil is when the deliveries this run's fan-out creates fall due for
// other runs. This run tries them at once (work), so a run that overlaps it
// (one woken by the table's stream while the scheduled one, or another
// woken one, is still going) must not read them as due and POST them too;
// should this run die, or leave them for later (its budget, its page's
// queue, a silent receiver), before recording an attempt, they fall due
// when its invocation would have ended, and the next run tries them. Their
// first attempt replaces the hold with the real outcome.
func (j *Job) holdUntil(ctx context.Context, now time.Time) time.Time {
	hold := j.opts.Timeout + j.opts.Reserve
	if dl, ok := ctx.Deadline(); ok {
		hold = max(hold, time.Until(dl))
	}
	return now.Add(hold)
}

// deliver makes one attempt of d and records it; d's webhook disabled, it
// records d as held instead. With claim, it first reserves d for this run
// (its next try moved to holdUntil) by a write conditioned on the version read, and leaves d
// alone if that write loses: a run that overlaps this one read d as due as
// well, and only one of them may POST it.
func (j *Job) deliver(ctx context.Context, r *run, pg *page, d domain.Delivery, claim bool) error {
	hooks, err := j.webhooks(ctx, pg, d.OrgID)
	if err != nil {
		return err
	}
	var hook *domain.Webhook
	pg.mu.Lock()
	for i := range hooks {
		if hooks[i].ID == d.Webhook {
			h := hooks[i]
			hook = &h
		}
	}
	pg.mu.Unlock()
	now := j.clock.Now()
	after := d
	switch {
	case hook == nil:
		after.State, after.NextTry, after.LastError = domain.DeliveryFailed, nil, "the webhook was deleted"
	case hook.State != domain.WebhookEnabled:
		after.State, after.NextTry = domain.DeliveryHeld, nil
	default:
		if claim {
			claimed := d
			until := j.holdUntil(ctx, now)
			claimed.NextTry = &until
			ok, err := j.store.SaveDelivery(ctx, d, claimed, nil)
			if err != nil || !ok {
				return err
			}
			claimed.Version++
			d = claimed
			after = d
		}
		a := j.post(ctx, *hook, d)
		if a.StatusCode == 0 {
			r.mu.Lock()
			r.silent[d.Webhook]++
			r.mu.Unlock()
		}
		after.Attempts = append(append([]domain.Attempt{}, d.Attempts...), a)
		after.LastCode, after.LastMs, after.LastError = a.StatusCode, a.DurationMs, a.Error
		if a.StatusCode >= 200 && a.StatusCode < 300 {
			after.State, after.NextTry = domain.DeliverySucceeded, nil
			break
		}
		start := d.Created
		if d.Retried != nil {
			start = *d.Retried
		}
		next := now.Add(NextGap(len(after.Attempts)))
		if next.Sub(start) <= RetryWindow {
			after.NextTry = &next
			break
		}
		after.State, after.NextTry = domain.DeliveryFailed, nil
	}
	var disable *domain.Event
	if hook != nil && hook.State == domain.WebhookEnabled && after.State == domain.DeliveryFailed {
		// Only the URL's host: its path and query often carry a secret.
		ev := domain.NewEvent(ctx, domain.EventWebhookOff, d.OrgID, domain.Subject{Kind: "webhook", ID: hook.ID}, now,
			map[string]any{"webhook": hook.ID, "host": urlHost(hook.URL), "delivery": d.ID, "attempts": len(after.Attempts),
				"reason": fmt.Sprintf("deliveries failed for %s (last: %s)", RetryWindow, lastOutcome(after))})
		disable = &ev
	}
	ok, err := j.store.SaveDelivery(ctx, d, after, disable)
	if err != nil || !ok {
		return err
	}
	r.count(func(s *Summary) {
		switch after.State {
		case domain.DeliverySucceeded:
			s.Succeeded++
		case domain.DeliveryFailed:
			s.Failed++
		case domain.DeliveryHeld:
			s.Held++
		default:
			s.Retrying++
		}
		if disable != nil {
			s.Disabled++
		}
	})
	if disable != nil {
		// The page's later deliveries to it are held; later pages read it anew.
		pg.mu.Lock()
		for i, h := range pg.hooks[d.OrgID] {
			if h.ID == d.Webhook {
				pg.hooks[d.OrgID][i].State = domain.WebhookDisabled
			}
		}
		pg.mu.Unlock()
	}
	level := slog.LevelInfo
	if after.State != domain.DeliverySucceeded {
		level = slog.LevelWarn
	}
	j.log.Log(ctx, level, "webhook delivery", "org", d.OrgID, "webhook", d.Webhook, "delivery", d.ID,
		"type", d.Type, "state", after.State, "statusCode", after.LastCode, "durationMs", after.LastMs, "error", after.LastError)
	return nil
}

// urlHost is the host of a webhook's URL, without port, path or query.
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

func lastOutcome(d domain.Delivery) string {
	if d.LastError != "" {
		return d.LastError
	}
	return fmt.Sprintf("HTTP %d", d.LastCode)
}

// post sends d to hook once. The body is the event as stored at fan-out;
// the signature covers the time of this attempt.
func (j *Job) post(ctx context.Context, hook domain.Webhook, d domain.Delivery) domain.Attempt {
	start := time.Now()
	at := j.clock.Now()
	a := domain.Attempt{At: at}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(d.Body))
	if err != nil {
		a.Error = "bad request: " + err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "envlease-webhooks/1")
	req.Header.Set(SignatureHeader, Sign(hook.Secret, at, d.Body))
	req.Header.Set(EventIDHeader, d.Event)
	req.Header.Set(EventTypeHeader, d.Type)
	req.Header.Set(DeliveryHeader, d.ID)
	res, err := j.client.Do(req)
	a.DurationMs = time.Since(start).Milliseconds()
	if err != nil {
		a.Error = attemptError(err)
		return a
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	a.StatusCode = res.StatusCode
	a.DurationMs = time.Since(start).Milliseconds()
	if res.StatusCode < 200 || res.StatusCode >= 300 {
		a.Error = fmt.Sprintf("the receiver answered %d", res.StatusCode)
	}
	return a
}

// attemptError says why an attempt got no answer, without the internals of
// the job's network (it is shown to the organization).
func attemptError(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, errRefused):
		if i := strings.Index(msg, errRefused.Error()); i >= 0 {
			return "refused: the URL's address is not public (" + strings.TrimPrefix(msg[i+len(errRefused.Error()):], ": ") + ")"
		}
		return "refused: the URL's address is not public"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "Timeout") || strings.Contains(msg, "timeout"):
		return "timeout: no answer in time"
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case strings.Contains(msg, "no such host"):
		return "the URL's host does not resolve"
	case strings.Contains(msg, "certificate") || strings.Contains(msg, "tls"):
		return "TLS handshake failed: " + lastPart(msg)
	}
	return "request failed: " + lastPart(msg)
}

func lastPart(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}
