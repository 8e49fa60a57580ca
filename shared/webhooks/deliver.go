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
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
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
	// Parallel bounds the POSTs in flight (default 8).
	Parallel int
	// Reserve is the time kept free before the context's deadline: no new
	// page is started after that (default Timeout + 5 s).
	Reserve time.Duration
	// Page is how many due entries are read at a time (default 50).
	Page int
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if o.Reserve <= 0 {
		o.Reserve = o.Timeout + 5*time.Second
	}
	if o.Page <= 0 {
		o.Page = 50
	}
	return o
}

// Summary is what one run did.
type Summary struct {
	FannedOut  int  `json:"fannedOut"`
	Created    int  `json:"deliveriesCreated"`
	Succeeded  int  `json:"succeeded"`
	Retrying   int  `json:"retrying"`
	Failed     int  `json:"failed"`
	Disabled   int  `json:"webhooksDisabled"`
	OutOfTime  bool `json:"outOfTime"`
	DynamoDB   int  `json:"-"`
	ShardsRead int  `json:"shardsRead"`
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

// run is the state of one run: webhooks read once per organization.
type run struct {
	mu    sync.Mutex
	hooks map[string][]domain.Webhook // org -> its webhooks
	sum   Summary
}

// Run works through every shard's due entries until none is left or the
// context's deadline is near. It is safe to run concurrently with itself:
// every action is a conditional write.
func (j *Job) Run(ctx context.Context) (Summary, error) {
	r := &run{hooks: map[string][]domain.Webhook{}}
	var errs []error
	for shard := 0; shard < j.store.OutboxShards(); shard++ {
		for {
			if j.outOfTime(ctx) {
				r.sum.OutOfTime = true
				return r.sum, errors.Join(errs...)
			}
			now := j.clock.Now()
			due, err := j.store.DueOutbox(ctx, shard, now, j.opts.Page)
			if err != nil {
				errs = append(errs, err)
				break
			}
			r.sum.ShardsRead++
			progress := j.work(ctx, r, due, &errs)
			if len(due) < j.opts.Page || progress == 0 {
				break
			}
		}
	}
	return r.sum, errors.Join(errs...)
}

func (j *Job) outOfTime(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < j.opts.Reserve
}

// work handles one page: events first (their fan-out is one write each),
// then the deliveries, Parallel at a time. It returns how many entries left
// the due index or moved on.
func (j *Job) work(ctx context.Context, r *run, due []domain.OutboxEntry, errs *[]error) int {
	var mu sync.Mutex
	progress := 0
	fail := func(err error) {
		mu.Lock()
		*errs = append(*errs, err)
		mu.Unlock()
	}
	sem := make(chan struct{}, j.opts.Parallel)
	var wg sync.WaitGroup
	// A delivery read from the due index is claimed before its POST
	// (another run may have read it too); one this run's fan-out created is
	// held for it already (holdUntil).
	type task struct {
		d     domain.Delivery
		claim bool
	}
	var todo []task
	for _, e := range due {
		if e.Event == nil {
			todo = append(todo, task{*e.Delivery, true})
			continue
		}
		created, ok, err := j.fanOut(ctx, r, *e.Event)
		if err != nil {
			fail(err)
			continue
		}
		if ok {
			progress++
			// Tried at once, whatever shard they are indexed in.
			for _, d := range created {
				todo = append(todo, task{d, false})
			}
		}
	}
	for _, tk := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ok, err := j.deliver(ctx, r, tk.d, tk.claim)
			if err != nil {
				fail(err)
				return
			}
			if ok {
				mu.Lock()
				progress++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return progress
}

func (j *Job) webhooks(ctx context.Context, r *run, org string) ([]domain.Webhook, error) {
	r.mu.Lock()
	hs, ok := r.hooks[org]
	r.mu.Unlock()
	if ok {
		return hs, nil
	}
	hs, err := j.store.ListWebhooks(ctx, org)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.hooks[org] = hs
	r.mu.Unlock()
	return hs, nil
}

// fanOut creates the event's deliveries and takes it out of the outbox.
func (j *Job) fanOut(ctx context.Context, r *run, ev domain.Event) ([]domain.Delivery, bool, error) {
	hooks, err := j.webhooks(ctx, r, ev.OrgID)
	if err != nil {
		return nil, false, err
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, false, domain.Internal(err)
	}
	now := j.clock.Now()
	hold := j.holdUntil(ctx, now)
	var ds []domain.Delivery
	for _, h := range hooks {
		// A webhook gets what happened from its creation on, not the outbox's backlog.
		if h.State != domain.WebhookEnabled || !h.Wants(ev.Type) || ev.Time.Before(h.Created) {
			continue
		}
		ds = append(ds, domain.Delivery{
			ID: store.DeliveryID(ev.ID), Webhook: h.ID, Event: ev.ID, Type: ev.Type, State: domain.DeliveryPending,
			Created: now, NextTry: &hold, Attempts: []domain.Attempt{}, OrgID: ev.OrgID, Body: body,
		})
	}
	ok, err := j.store.FanOut(ctx, ev, ds)
	if err != nil || !ok {
		return nil, false, err
	}
	r.mu.Lock()
	r.sum.FannedOut++
	r.sum.Created += len(ds)
	r.mu.Unlock()
	return ds, true, nil
}

// holdUntil is when the deliveries this run's fan-out creates fall due for
// other runs. This run tries them at once (work), so a run that overlaps it
// (one woken by the table's stream while the scheduled one, or another
// woken one, is still going) must not read them as due and POST them too;
// should this run die before recording an attempt, they fall due when its
// invocation would have ended, and the next run tries them. Their first
// attempt replaces the hold with the real outcome.
func (j *Job) holdUntil(ctx context.Context, now time.Time) time.Time {
	hold := j.opts.Timeout + j.opts.Reserve
	if dl, ok := ctx.Deadline(); ok {
		hold = max(hold, time.Until(dl))
	}
	return now.Add(hold)
}

// deliver makes one attempt of d and records it. With claim, it first holds
// d for this run (holdUntil) by a write conditioned on the version read, and
// leaves d alone if that write loses: a run that overlaps this one read d
// as due as well, and only one of them may POST it.
func (j *Job) deliver(ctx context.Context, r *run, d domain.Delivery, claim bool) (bool, error) {
	hooks, err := j.webhooks(ctx, r, d.OrgID)
	if err != nil {
		return false, err
	}
	var hook *domain.Webhook
	for i := range hooks {
		if hooks[i].ID == d.Webhook {
			hook = &hooks[i]
		}
	}
	now := j.clock.Now()
	after := d
	switch {
	case hook == nil:
		after.State, after.NextTry, after.LastError = domain.DeliveryFailed, nil, "the webhook was deleted"
	case hook.State != domain.WebhookEnabled:
		after.State, after.NextTry, after.LastError = domain.DeliveryFailed, nil, "the webhook is disabled"
	default:
		if claim {
			held := d
			hold := j.holdUntil(ctx, now)
			held.NextTry = &hold
			ok, err := j.store.SaveDelivery(ctx, d, held, nil)
			if err != nil || !ok {
				return false, err
			}
			held.Version++
			d = held
			after = d
		}
		a := j.post(ctx, *hook, d)
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
		ev := domain.NewEvent(ctx, domain.EventWebhookOff, d.OrgID, domain.Subject{Kind: "webhook", ID: hook.ID}, now,
			map[string]any{"url": hook.URL, "delivery": d.ID, "attempts": len(after.Attempts),
				"reason": fmt.Sprintf("deliveries failed for %s (last: %s)", RetryWindow, lastOutcome(after))})
		disable = &ev
	}
	ok, err := j.store.SaveDelivery(ctx, d, after, disable)
	if err != nil || !ok {
		return false, err
	}
	r.mu.Lock()
	switch after.State {
	case domain.DeliverySucceeded:
		r.sum.Succeeded++
	case domain.DeliveryFailed:
		r.sum.Failed++
	default:
		r.sum.Retrying++
	}
	if disable != nil {
		r.sum.Disabled++
		// Later deliveries of this run see it disabled.
		for i, h := range r.hooks[d.OrgID] {
			if h.ID == d.Webhook {
				r.hooks[d.OrgID][i].State = domain.WebhookDisabled
			}
		}
	}
	r.mu.Unlock()
	level := slog.LevelInfo
	if after.State != domain.DeliverySucceeded {
		level = slog.LevelWarn
	}
	j.log.Log(ctx, level, "webhook delivery", "org", d.OrgID, "webhook", d.Webhook, "delivery", d.ID,
		"type", d.Type, "state", after.State, "statusCode", after.LastCode, "durationMs", after.LastMs, "error", after.LastError)
	return true, nil
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
