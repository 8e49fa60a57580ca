package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

// A retry by hand reads the webhook's deliveries to find the held ones in
// one query while they fit in a page, however many of them are not held
// and whatever else the table holds: the query's pages are not split by a
// Limit, which with a filter caps the items read, not the ones returned.
func TestRetryReadsDeliveriesInOneQuery(t *testing.T) {
	e := apitest.New(t, nil)
	ctx := context.Background()
	now := e.Clock.Now()
	hook := domain.Webhook{ID: "whk_retried", OrgID: "acme", URL: "https://93.184.216.34/hook", Types: []string{"*"},
		State: domain.WebhookDisabled, Created: now, CreatedBy: "alice", Secret: webhooks.NewSecret(), SecretPrefix: "whsec_"}
	other := hook
	other.ID, other.State = "whk_other", domain.WebhookEnabled
	for _, w := range []domain.Webhook{hook, other} {
		if err := e.Store.PutWebhook(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	// fanOut writes n deliveries of state to a webhook, with one event.
	fanOut := func(w domain.Webhook, n int, state string) []string {
		t.Helper()
		ev := domain.NewEvent(ctx, domain.EventQuotaRefused, "acme", domain.Subject{Kind: "template", ID: "shell"}, now, map[string]any{})
		if err := e.Store.PutEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
		var ds []domain.Delivery
		var ids []string
		for range n {
			d := domain.Delivery{ID: store.DeliveryID(domain.NewEvent(ctx, ev.Type, "acme", ev.Subject, now, nil).ID), Webhook: w.ID,
				Event: ev.ID, Type: ev.Type, State: state, Created: now, Attempts: []domain.Attempt{{At: now, StatusCode: 500}},
				LastCode: 500, OrgID: "acme", Body: []byte(`{}`)}
			ds = append(ds, d)
			ids = append(ids, d.ID)
		}
		if ok, err := e.Store.FanOut(ctx, ev, ds); err != nil || !ok {
			t.Fatalf("fan out: %v %v", ok, err)
		}
		return ids
	}
	// Well over a hundred deliveries that are not held, around the few
	// that are, and more of another webhook elsewhere in the table.
	fanOut(other, 300, domain.DeliveryFailed)
	fanOut(hook, 150, domain.DeliveryFailed)
	held := fanOut(hook, 2, domain.DeliveryHeld)
	target := fanOut(hook, 1, domain.DeliveryFailed)[0]

	counter := store.NewCallCounter()
	counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option))
	svc := webhooks.NewService(counted, e.Clock, webhooks.Guard{})
	alice := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin}
	d, err := svc.Retry(ctx, alice, hook.ID, target)
	if err != nil || d.State != domain.DeliveryPending {
		t.Fatalf("retry: %+v %v", d, err)
	}
	if q := counter.Counts()["Query"]; q != 1 {
		t.Fatalf("the retry made %d queries, want 1 (calls %v)", q, counter.Counts())
	}
	for _, id := range held {
		got, err := e.Store.GetDelivery(ctx, "acme", hook.ID, id)
		if err != nil || got.State != domain.DeliveryPending || got.NextTry == nil || got.NextTry.After(e.Clock.Now().Add(time.Second)) {
			t.Fatalf("held delivery %s after the retry: %+v %v", id, got, err)
		}
	}
}
