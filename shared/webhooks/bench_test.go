package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

// countingStore is e's store through a client that counts DynamoDB calls.
func countingStore(e *apitest.Env) (*store.Store, *store.CallCounter) {
	cc := store.NewCallCounter()
	return e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), cc.Option)), cc
}

// A lease writes its environment.leased event inside its one
// TransactWriteItems: no call is added for the outbox.
func TestLeaseWithItsEventIsOneTransaction(t *testing.T) {
	e := apitest.New(t, nil)
	st, cc := countingStore(e)
	svc := environments.NewService(st, e.Clock)
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}
	ctx := domain.WithActor(context.Background(), domain.ActorOf(bob))
	if _, err := svc.Lease(ctx, bob, environments.LeaseRequest{Template: "sleeper"}, ""); err != nil {
		t.Fatal(err)
	}
	cc.Reset()
	res, err := svc.Lease(ctx, bob, environments.LeaseRequest{Template: "sleeper"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var leased struct{ Environment domain.Environment }
	if err := json.Unmarshal(res.Body, &leased); err != nil {
		t.Fatal(err)
	}
	if got := cc.Counts(); got["TransactWriteItems"] != 1 {
		t.Fatalf("a lease made %v", got)
	}
	page, err := e.Store.ListEvents(ctx, "acme", domain.EventQuery{Subject: &domain.Subject{Kind: "environment", ID: leased.Environment.ID}, Limit: 10}, e.Clock.Now())
	if err != nil || len(page.Events) != 1 || page.Events[0].Type != domain.EventEnvLeased || page.Events[0].Actor.ID != "bob" {
		t.Fatalf("events of the lease: %+v %v", page.Events, err)
	}
}

// BenchmarkLease reports the DynamoDB calls of a lease, its event included.
func BenchmarkLease(b *testing.B) {
	e := apitest.New(b, nil)
	st, cc := countingStore(e)
	svc := environments.NewService(st, e.Clock)
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}
	ctx := context.Background()
	n := 0
	for b.Loop() {
		res, err := svc.Lease(ctx, bob, environments.LeaseRequest{Template: "sleeper"}, "")
		if err != nil {
			b.Fatal(err)
		}
		var l struct{ Environment domain.Environment }
		if err := json.Unmarshal(res.Body, &l); err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Delete(ctx, bob, l.Environment.ID); err != nil {
			b.Fatal(err)
		}
		n++
	}
	c := cc.Counts()
	b.ReportMetric(float64(c["TransactWriteItems"])/float64(n), "transactions/lease+delete")
	b.ReportMetric(float64(cc.Total())/float64(n), "calls/lease+delete")
}

// BenchmarkDelivery reports what delivering an event costs in DynamoDB calls
// (and time, to a local receiver): events are written in batches of 50 with
// two webhooks wanting them, and one job run fans them out and delivers them.
func BenchmarkDelivery(b *testing.B) {
	rcv := newReceiver(b, 200)
	e := apitest.New(b, nil)
	e.Clock.Advance(time.Second)
	ctx := context.Background()
	for i := range 2 {
		if err := e.Store.PutWebhook(ctx, domain.Webhook{ID: fmt.Sprintf("whk_bench%d", i), OrgID: "acme", URL: rcv.URL, Types: []string{"*"},
			State: domain.WebhookEnabled, Created: e.Clock.Now(), CreatedBy: "alice", Secret: webhooks.NewSecret(), SecretPrefix: "whsec_"}); err != nil {
			b.Fatal(err)
		}
	}
	st, cc := countingStore(e)
	job := webhooks.NewJob(st, e.Clock, e.Log, webhooks.Options{
		Guard: webhooks.Guard{AllowLocal: true}, TLS: rcv.Client().Transport.(*http.Transport).TLSClientConfig,
	})
	const batch = 50
	delivered := 0
	cc.Reset()
	for b.Loop() {
		b.StopTimer()
		for range batch {
			ev := domain.NewEvent(ctx, domain.EventQuotaRefused, "acme", domain.Subject{Kind: "template", ID: "shell"}, e.Clock.Now(), map[string]any{"template": "shell"})
			if err := e.Store.PutEvent(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		sum, err := job.Run(ctx)
		if err != nil || sum.Succeeded != 2*batch {
			b.Fatalf("run: %+v %v", sum, err)
		}
		delivered += sum.Succeeded
	}
	c := cc.Counts()
	b.ReportMetric(float64(cc.Total())/float64(delivered), "calls/delivery")
	b.ReportMetric(float64(c["TransactWriteItems"])/float64(delivered), "transactions/delivery")
	b.ReportMetric(float64(c["Query"])/float64(delivered), "queries/delivery")
}
