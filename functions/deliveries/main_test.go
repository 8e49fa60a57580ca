package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/webhooks"
)

// Each sample invocation event (the EventBridge schedule's and a batch of
// the table's stream) goes through the handler against the emulators: an
// event of the outbox reaches a local HTTPS receiver, and the summary is
// logged as JSON with what woke the run.
func TestSampleEventsDeliver(t *testing.T) {
	for _, tc := range []struct {
		file, trigger string
	}{
		{"scheduled-deliveries.json", triggerSchedule},
		{"stream-deliveries.json", triggerStream},
	} {
		t.Run(tc.trigger, func(t *testing.T) {
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
			var ev json.RawMessage
			apitest.Event(t, tc.file, &ev)
			sum, err := handler(job, log)(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			if got.Load() != 1 || sum.Succeeded != 1 || sum.Created != 1 {
				t.Fatalf("receiver got %d, summary %+v", got.Load(), sum)
			}
			for _, want := range []string{`"msg":"deliveries run"`, `"succeeded":1`, `"trigger":"` + tc.trigger + `"`} {
				if !strings.Contains(logs.String(), want) {
					t.Fatalf("log lacks %s: %s", want, logs.String())
				}
			}
		})
	}
}

// An invocation that is neither shape fails without running the job.
func TestUnknownInvocationFails(t *testing.T) {
	e := apitest.New(t, nil)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	job := webhooks.NewJob(e.Store, e.Clock, log, webhooks.Options{})
	if _, err := handler(job, log)(context.Background(), json.RawMessage(`{"source":"aws.s3"}`)); err == nil {
		t.Fatal("an S3 notification ran the job")
	}
	if !strings.Contains(logs.String(), `"level":"ERROR"`) || strings.Contains(logs.String(), `"summary"`) {
		t.Fatalf("log: %s", logs.String())
	}
}
