package faults_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

// TestDeliveryJobFailureAtEveryCall runs the delivery job with DynamoDB
// failing from its k-th call on, for every k until a run makes fewer calls,
// then lets it run again with the table back. Each round has an event to fan
// out and a delivery on its last try (its 24 hours nearly over) to a
// receiver that answers 500, so a run writes a fan-out and a webhook's
// disabling with its event. Whatever failed: the event leaves the outbox
// once, with no more than one delivery per webhook, the webhook ends
// disabled, and there is exactly one webhook.disabled event for it.
func TestDeliveryJobFailureAtEveryCall(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	var posts atomic.Int32
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer rcv.Close()
	job := webhooks.NewJob(s.Store, s.Clock, s.Log, webhooks.Options{
		Guard: webhooks.Guard{AllowLocal: true}, TLS: rcv.Client().Transport.(*http.Transport).TLSClientConfig,
	})
	// Earlier events (the fixture's, the stack's set-up) leave the outbox first.
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for k := 1; ; k++ {
		if k > 80 {
			t.Fatal("still failing after 80 calls; the run makes more calls than expected")
		}
		now := s.Clock.Now()
		hook := domain.Webhook{ID: auth.NewID("whk_"), OrgID: "acme", URL: rcv.URL, Types: []string{"*"}, State: domain.WebhookEnabled,
			Created: now.Add(-webhooks.RetryWindow), CreatedBy: "alice", Secret: webhooks.NewSecret(), SecretPrefix: "whsec_"}
		if err := s.Store.PutWebhook(ctx, hook); err != nil {
			t.Fatal(err)
		}
		// A delivery on its last try: created almost 24 hours ago.
		old := domain.NewEvent(ctx, domain.EventQuotaRefused, "acme", domain.Subject{Kind: "template", ID: "shell"}, now.Add(-webhooks.RetryWindow+10*time.Second), map[string]any{})
		if err := s.Store.PutEvent(ctx, old); err != nil {
			t.Fatal(err)
		}
		last := domain.Delivery{ID: store.DeliveryID(old.ID), Webhook: hook.ID, Event: old.ID, Type: old.Type, State: domain.DeliveryPending,
			Created: old.Time, NextTry: &now, Attempts: []domain.Attempt{}, OrgID: "acme", Body: []byte(`{}`)}
		if ok, err := s.Store.FanOut(ctx, old, []domain.Delivery{last}); err != nil || !ok {
			t.Fatalf("set-up fan-out: %v %v", ok, err)
		}
		// An event to fan out, in this run.
		fresh := domain.NewEvent(ctx, domain.EventQuotaRefused, "acme", domain.Subject{Kind: "template", ID: "sleeper"}, now, map[string]any{})
		if err := s.Store.PutEvent(ctx, fresh); err != nil {
			t.Fatal(err)
		}

		s.fault.arm(k)
		_, runErr := job.Run(ctx)
		calls := s.fault.disarm()
		if calls >= k && runErr == nil {
			t.Fatalf("k=%d: the run failed at a call and reported nothing", k)
		}
		// The table is back: runs settle what is left (a try of the fresh
		// event that came before the disabling is due again 30 s later).
		for i := 0; i < 3; i++ {
			if _, err := job.Run(ctx); err != nil {
				t.Fatalf("k=%d: run after the fault: %v", k, err)
			}
			s.Clock.Advance(time.Minute)
		}
		s.deliveredOnce(k, hook, fresh, last)
		if calls < k {
			t.Logf("%d DynamoDB calls in a run, each failed in turn; %d POSTs", k-1, posts.Load())
			return
		}
	}
}

// deliveredOnce checks what the rounds above must leave, from the raw table.
func (s *stack) deliveredOnce(k int, hook domain.Webhook, fresh domain.Event, last domain.Delivery) {
	t := s.T
	t.Helper()
	ctx := context.Background()
	w, err := s.Store.GetWebhook(ctx, "acme", hook.ID)
	if err != nil || w.State != domain.WebhookDisabled {
		t.Fatalf("k=%d: webhook %+v %v, want disabled", k, w, err)
	}
	d, err := s.Store.GetDelivery(ctx, "acme", hook.ID, last.ID)
	if err != nil || d.State != domain.DeliveryFailed || len(d.Attempts) < 1 {
		t.Fatalf("k=%d: last delivery %+v %v", k, d, err)
	}
	page, err := s.Store.ListEvents(ctx, "acme", domain.EventQuery{Subject: &domain.Subject{Kind: "webhook", ID: hook.ID}, Limit: 50}, s.Clock.Now())
	if err != nil || len(page.Events) != 1 || page.Events[0].Type != domain.EventWebhookOff {
		t.Fatalf("k=%d: events of the webhook: %+v %v", k, page.Events, err)
	}
	// The fresh event left the outbox, with at most one delivery to the webhook.
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Dynamo.Table),
		Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "EVT#acme"}, "SK": &types.AttributeValueMemberS{Value: fresh.ID}}})
	if err != nil || out.Item == nil {
		t.Fatalf("k=%d: event %s: %v", k, fresh.ID, err)
	}
	if _, in := out.Item["GSI2PK"]; in {
		t.Fatalf("k=%d: event %s is still in the outbox", k, fresh.ID)
	}
	ds, err := s.Store.ListDeliveries(ctx, "acme", hook.ID, 50, "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range ds.Deliveries {
		if x.Event == fresh.ID {
			n++
			if x.State == domain.DeliveryPending {
				t.Fatalf("k=%d: the fresh event's delivery is still pending", k)
			}
		}
		if !strings.HasPrefix(x.ID, "dlv_") {
			t.Fatalf("delivery id %s", x.ID)
		}
	}
	// One when the webhook was still enabled at the fan-out, none when the
	// disabling came first; never two.
	if n > 1 {
		t.Fatalf("k=%d: %d deliveries of the fresh event to the webhook", k, n)
	}
}
