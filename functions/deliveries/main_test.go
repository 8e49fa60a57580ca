package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/webhooks"
)

// The sample EventBridge event goes through the handler against minidyn: an
// event of the outbox reaches a local HTTPS receiver, and the summary is
// logged as JSON.
func TestScheduledEventDelivers(t *testing.T) {
	var got atomic.Int32
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(webhooks.SignatureHeader) != "" {
			got.Add(1)
		}
	}))
	defer rcv.Close()
	e := apitest.New(t, nil)
	ctx := context.Background()
	e.Clock.Advance(1)
	if err := e.Store.PutWebhook(ctx, domain.Webhook{ID: "whk_test", OrgID: "acme", URL: rcv.URL, Types: []string{"key.created"},
		State: domain.WebhookEnabled, Created: e.Clock.Now(), CreatedBy: "alice", Secret: webhooks.NewSecret(), SecretPrefix: "whsec_"}); err != nil {
		t.Fatal(err)
	}
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}
	if _, err := keys.NewService(e.Store, e.Clock).CreateToken(ctx, bob, "laptop", "cli"); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	job := webhooks.NewJob(e.Store, e.Clock, log, webhooks.Options{
		Guard: webhooks.Guard{AllowLocal: true}, TLS: rcv.Client().Transport.(*http.Transport).TLSClientConfig,
	})
	var ev events.EventBridgeEvent
	apitest.Event(t, "scheduled-deliveries.json", &ev)
	sum, err := handler(job, log)(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if got.Load() != 1 || sum.Succeeded != 1 || sum.Created != 1 {
		t.Fatalf("receiver got %d, summary %+v", got.Load(), sum)
	}
	if !strings.Contains(logs.String(), `"msg":"deliveries run"`) || !strings.Contains(logs.String(), `"succeeded":1`) {
		t.Fatalf("log: %s", logs.String())
	}
}
