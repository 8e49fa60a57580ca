package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

// oneShard is a store over the test's table with one due shard, so the
// order of a run's pages is known; it reads one of the partitions the
// stack's store writes, emptied of the fixture's events at the start.
type oneShard struct {
	*apitest.Env
	st *store.Store
}

func newOneShard(t *testing.T) *oneShard {
	e := apitest.New(t, nil)
	e.Clock.Advance(time.Second)
	o := &oneShard{Env: e, st: e.Store.WithDueShards(1)}
	// The partition may hold events of the fixture: they leave it first.
	if _, err := o.job(o.st, nil, webhooks.Options{}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return o
}

func (o *oneShard) hook(id, url string) domain.Webhook {
	o.T.Helper()
	w := domain.Webhook{ID: id, OrgID: "acme", URL: url, Types: []string{"*"}, State: domain.WebhookEnabled,
		Created: o.Clock.Now(), CreatedBy: "alice", Secret: webhooks.NewSecret(), SecretPrefix: "whsec_"}
	if err := o.st.PutWebhook(context.Background(), w); err != nil {
		o.T.Fatal(err)
	}
	return w
}

func (o *oneShard) events(n int, subject string) []domain.Event {
	o.T.Helper()
	var out []domain.Event
	for range n {
		ev := domain.NewEvent(context.Background(), domain.EventQuotaRefused, "acme", domain.Subject{Kind: "template", ID: subject}, o.Clock.Now(), map[string]any{})
		if err := o.st.PutEvent(context.Background(), ev); err != nil {
			o.T.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func (o *oneShard) job(st webhooks.Store, rcv *receiver, opts webhooks.Options) *webhooks.Job {
	opts.Guard = webhooks.Guard{AllowLocal: true}
	if rcv != nil {
		opts.TLS = rcv.Client().Transport.(*http.Transport).TLSClientConfig
	}
	return webhooks.NewJob(st, o.Clock, o.Log, opts)
}

func (o *oneShard) states(hook string) map[string]int {
	o.T.Helper()
	page, err := o.st.ListDeliveries(context.Background(), "acme", hook, 100, "")
	if err != nil {
		o.T.Fatal(err)
	}
	out := map[string]int{}
	for _, d := range page.Deliveries {
		out[d.State]++
	}
	return out
}

// poisonStore fails every fan-out of events about subject "poison".
type poisonStore struct {
	*store.Store
	onFanOut func(ev domain.Event)
}

func (p poisonStore) FanOut(ctx context.Context, ev domain.Event, ds []domain.Delivery) (bool, error) {
	if ev.Subject.ID == "poison" {
		return false, domain.Unavailable("the table", fmt.Errorf("injected"))
	}
	ok, err := p.Store.FanOut(ctx, ev, ds)
	if p.onFanOut != nil {
		p.onFanOut(ev)
	}
	return ok, err
}

// Entries that keep failing at the head of a shard, a page each, do not
// hide the ones behind them: the run pages on with the index's cursor and
// reports the failures; the failing entries stay due.
func TestRunPagesPastFailingEntries(t *testing.T) {
	o := newOneShard(t)
	rcv := newReceiver(t, 200)
	w := o.hook("whk_a", rcv.URL)
	o.events(3, "poison")
	o.events(3, "fine")
	job := o.job(poisonStore{Store: o.st}, rcv, webhooks.Options{Page: 1})
	sum, err := job.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("the failures are not reported: %v", err)
	}
	if sum.FannedOut != 3 || sum.Succeeded != 3 || rcv.count() != 3 || o.states(w.ID)[domain.DeliverySucceeded] != 3 {
		t.Fatalf("run %+v, receiver got %d", sum, rcv.count())
	}
	// Still due: a run whose store works fans them out.
	sum, err = o.job(o.st, rcv, webhooks.Options{Page: 1}).Run(context.Background())
	if err != nil || sum.FannedOut != 3 || rcv.count() != 6 {
		t.Fatalf("second run %+v %v, receiver got %d", sum, err, rcv.count())
	}
}

// A webhook created while a run is under way gets the events written after
// it that the same run fans out later: webhooks are read per page, not once
// per run.
func TestWebhookCreatedDuringRun(t *testing.T) {
	o := newOneShard(t)
	rcv := newReceiver(t, 200)
	first := o.events(1, "before")
	var once sync.Once
	var w domain.Webhook
	st := poisonStore{Store: o.st, onFanOut: func(ev domain.Event) {
		if ev.ID != first[0].ID {
			return
		}
		once.Do(func() {
			o.Clock.Advance(time.Second)
			w = o.hook("whk_late", rcv.URL)
			o.Clock.Advance(time.Second)
			o.events(2, "after")
		})
	}}
	// The run's time is that of its start: let the events written during it be due.
	job := o.job(st, rcv, webhooks.Options{Page: 1})
	if sum, err := job.Run(context.Background()); err != nil || sum.FannedOut != 1 {
		t.Fatalf("first run %+v %v", sum, err)
	}
	sum, err := job.Run(context.Background())
	if err != nil || sum.FannedOut != 2 || sum.Created != 2 || rcv.count() != 2 {
		t.Fatalf("second run %+v %v, receiver got %d", sum, err, rcv.count())
	}
	if got := o.states(w.ID); got[domain.DeliverySucceeded] != 2 {
		t.Fatalf("deliveries of the late webhook: %v", got)
	}
}

// budgetStore counts the outbox pages a run reads; on its second page read
// it spends the run's budget (its clock moves past the deadline), as a
// run that reached its Lambda's timeout would.
type budgetStore struct {
	*store.Store
	pages atomic.Int32
	spend func()
}

func (b *budgetStore) DueOutbox(ctx context.Context, shard int, now time.Time, limit int, cursor string) ([]domain.OutboxEntry, string, error) {
	b.pages.Add(1)
	return b.Store.DueOutbox(ctx, shard, now, limit, cursor)
}

// The budget is checked before each POST: once spent, no POST starts, and
// what is left stays due (pending, never lost) for the next run.
func TestBudgetCheckedBeforeEachPost(t *testing.T) {
	o := newOneShard(t)
	budgetClk := clock.NewFake(time.Now())
	var rcv *receiver
	rcv = newReceiver(t, 200)
	rcv.onRequest = func() { budgetClk.Advance(2 * time.Hour) }
	w := o.hook("whk_a", rcv.URL)
	o.events(6, "x")
	ctx, cancel := context.WithDeadline(context.Background(), budgetClk.Now().Add(time.Hour))
	defer cancel()
	job := o.job(o.st, rcv, webhooks.Options{BudgetClock: budgetClk, Reserve: time.Minute, PerWebhook: 1})
	sum, err := job.Run(ctx)
	if err != nil || sum.FannedOut != 6 || sum.Succeeded != 1 || sum.Deferred != 5 || !sum.OutOfTime || rcv.count() != 1 {
		t.Fatalf("run %+v %v, receiver got %d", sum, err, rcv.count())
	}
	if got := o.states(w.ID); got[domain.DeliveryPending] != 5 {
		t.Fatalf("after the run: %v", got)
	}
	rcv.onRequest = nil
	// Created by this run's fan-out, they fall due for others when its invocation would have ended.
	o.Clock.Advance(2 * time.Hour)
	sum, err = job.Run(context.Background())
	if err != nil || sum.Succeeded != 5 || rcv.count() != 6 {
		t.Fatalf("next run %+v %v, receiver got %d", sum, err, rcv.count())
	}
}

// One organization's slow receiver holds at most PerWebhook of the run's
// shared POSTs: another webhook's deliveries go through while it hangs.
func TestSlowReceiverHoldsTwoSlots(t *testing.T) {
	o := newOneShard(t)
	fast := newReceiver(t, 200)
	const n = 10
	allFast := make(chan struct{})
	var fastOnce sync.Once
	fast.onRequest = func() {
		if fast.count() == n {
			fastOnce.Do(func() { close(allFast) })
		}
	}
	slow := newReceiver(t, 200)
	var inFlight, most atomic.Int32
	var waited atomic.Bool
	slow.onRequest = func() {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
		}
		select {
		case <-allFast:
		case <-time.After(30 * time.Second):
			waited.Store(true) // the fast receiver never got its deliveries while this one hung
		}
	}
	o.hook("whk_fast", fast.URL)
	o.hook("whk_slow", slow.URL)
	o.events(n, "x")
	job := o.job(o.st, fast, webhooks.Options{Parallel: 3, PerWebhook: 2, Timeout: time.Minute})
	sum, err := job.Run(context.Background())
	if err != nil || sum.Succeeded != 2*n {
		t.Fatalf("run %+v %v", sum, err)
	}
	if waited.Load() {
		t.Fatal("the slow receiver held the shared slots: the other webhook's deliveries waited for it")
	}
	if most.Load() > 2 {
		t.Fatalf("%d POSTs in flight to one webhook, want at most 2", most.Load())
	}
}

// A receiver that gives no answer to an attempt of a run gets no new attempt
// in that run (at most the PerWebhook in flight then go unanswered): the rest
// wait, pending, for the next. A timeout and a connection closed without an
// answer are the same to the job (no status); the receiver here closes it
// once it has counted the request, so every attempt recorded reached it
// however slow the machine (with a short timeout instead, a loaded machine
// could time out an attempt before its request arrived). With one POST at a
// time for the whole run, the second of the webhook's slots waits for the
// run's while the first attempt goes unanswered: it must not POST once it
// gets it.
func TestSilentReceiverDeferred(t *testing.T) {
	cases := []struct {
		name        string
		parallel    int
		least, most int
	}{
		{"attempts in flight together", 0, 1, 2},
		{"an attempt waiting for the run's slot", 1, 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOneShard(t)
			rcv := newReceiver(t, 200)
			rcv.drop = true
			w := o.hook("whk_silent", rcv.URL)
			o.events(6, "x")
			job := o.job(o.st, rcv, webhooks.Options{PerWebhook: 2, Parallel: tc.parallel})
			sum, err := job.Run(context.Background())
			if err != nil || sum.Retrying < tc.least || sum.Retrying > tc.most || sum.Retrying+sum.Deferred != 6 || rcv.count() != sum.Retrying {
				t.Fatalf("run %+v %v, receiver got %d", sum, err, rcv.count())
			}
			if got := o.states(w.ID); got[domain.DeliveryPending] != 6 {
				t.Fatalf("deliveries: %v", got)
			}
		})
	}
}

// Should an organization have more webhooks than one transaction holds,
// the fan-out still creates every delivery, once.
func TestFanOutPastOneTransaction(t *testing.T) {
	o := newOneShard(t)
	ctx := context.Background()
	ev := o.events(1, "x")[0]
	var ds []domain.Delivery
	now := o.Clock.Now()
	for i := range 130 {
		ds = append(ds, domain.Delivery{ID: store.DeliveryID(ev.ID), Webhook: fmt.Sprintf("whk_%03d", i), Event: ev.ID, Type: ev.Type,
			State: domain.DeliveryPending, Created: now, NextTry: &now, Attempts: []domain.Attempt{}, OrgID: "acme", Body: []byte(`{}`)})
	}
	if ok, err := o.st.FanOut(ctx, ev, ds); err != nil || !ok {
		t.Fatalf("fan-out: %v %v", ok, err)
	}
	if ok, err := o.st.FanOut(ctx, ev, ds); err != nil || ok {
		t.Fatalf("second fan-out: %v %v", ok, err)
	}
	for _, d := range ds {
		got, err := o.st.GetDelivery(ctx, "acme", d.Webhook, d.ID)
		if err != nil || got.State != domain.DeliveryPending || got.Version != 0 {
			t.Fatalf("delivery to %s: %+v %v", d.Webhook, got, err)
		}
	}
}

// Creates that race cannot pass the organization's limit together: the
// count is kept in the same transaction as each create; a delete makes
// room for one more.
func TestWebhookLimitUnderRace(t *testing.T) {
	s := newStack(t, nil, true)
	var created, refused atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res := s.Do("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"*"}})
				switch res.Status {
				case 201:
					created.Add(1)
				case 409:
					refused.Add(1)
					return
				case 503:
					// a transaction conflict past its retries: try again
				default:
					t.Errorf("create: %d %s", res.Status, res.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	var hooks struct{ Webhooks []domain.Webhook }
	s.Do("GET", "/v1/webhooks", apitest.AliceToken, nil).JSON(t, &hooks)
	if created.Load() != webhooks.MaxWebhooks || len(hooks.Webhooks) != webhooks.MaxWebhooks || refused.Load() != 6 {
		t.Fatalf("created %d, listed %d, refused %d; want %d, %d, 6", created.Load(), len(hooks.Webhooks), refused.Load(), webhooks.MaxWebhooks, webhooks.MaxWebhooks)
	}
	s.must("DELETE", "/v1/webhooks/"+hooks.Webhooks[0].ID, apitest.AliceToken, nil, 204)
	s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"*"}}, 201)
	if res := s.Do("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"*"}}); res.Status != 409 {
		t.Fatalf("past the limit after a delete and a create: %d", res.Status)
	}
}

// An organization's webhooks written before it kept a count (or by
// PutWebhook) are counted at its first create.
func TestWebhookCountStartsFromListing(t *testing.T) {
	s := newStack(t, nil, true)
	for i := range webhooks.MaxWebhooks - 1 {
		w := domain.Webhook{ID: fmt.Sprintf("whk_old%02d", i), OrgID: "acme", URL: "https://127.0.0.1/x", Types: []string{"*"},
			State: domain.WebhookEnabled, Created: s.Clock.Now(), CreatedBy: "alice", Secret: webhooks.NewSecret(), SecretPrefix: "whsec_"}
		if err := s.Store.PutWebhook(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"*"}}, 201)
	if res := s.Do("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"*"}}); res.Status != 409 {
		t.Fatalf("past the limit: %d", res.Status)
	}
	s.must("DELETE", "/v1/webhooks/whk_old00", apitest.AliceToken, nil, 204)
	s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"*"}}, 201)
}

// staleHooks lists the webhooks as they were before a retry by hand enabled
// them again: disabled.
type staleHooks struct{ *store.Store }

func (s staleHooks) ListWebhooks(ctx context.Context, org string) ([]domain.Webhook, error) {
	hs, err := s.Store.ListWebhooks(ctx, org)
	for i := range hs {
		hs[i].State = domain.WebhookDisabled
	}
	return hs, err
}

// A run that read a webhook as disabled just before it was enabled again
// (and its held deliveries released) holds nothing more: the hold is
// conditioned on the webhook still being disabled, so the event and the
// delivery stay due and a later run sends them.
func TestNoHoldAfterEnable(t *testing.T) {
	o := newOneShard(t)
	rcv := newReceiver(t, 200)
	o.hook("whk_a", rcv.URL)
	o.events(1, "x")
	sum, err := o.job(staleHooks{o.st}, rcv, webhooks.Options{}).Run(context.Background())
	if err != nil || sum.FannedOut != 0 || sum.Held != 0 {
		t.Fatalf("run on a stale read %+v %v", sum, err)
	}
	sum, err = o.job(o.st, rcv, webhooks.Options{}).Run(context.Background())
	if err != nil || sum.FannedOut != 1 || sum.Succeeded != 1 || rcv.count() != 1 {
		t.Fatalf("next run %+v %v", sum, err)
	}
	// A pending delivery read with its webhook disabled stays pending.
	rcv2 := newReceiver(t, 500, 200)
	w2 := o.hook("whk_b", rcv2.URL)
	o.events(1, "y")
	if sum, err := o.job(o.st, rcv2, webhooks.Options{}).Run(context.Background()); err != nil || sum.Retrying != 1 {
		t.Fatalf("first try %+v %v", sum, err)
	}
	o.Clock.Advance(time.Minute)
	if sum, err := o.job(staleHooks{o.st}, rcv2, webhooks.Options{}).Run(context.Background()); err != nil || sum.Held != 0 {
		t.Fatalf("stale run %+v %v", sum, err)
	}
	if got := o.states(w2.ID); got[domain.DeliveryPending] != 1 {
		t.Fatalf("after a stale run: %v", got)
	}
	if sum, err := o.job(o.st, rcv2, webhooks.Options{}).Run(context.Background()); err != nil || sum.Succeeded != 1 {
		t.Fatalf("next run %+v %v", sum, err)
	}
}
