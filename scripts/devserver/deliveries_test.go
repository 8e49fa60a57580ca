package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/webhooks"
)

// The delivery job runs on the -webhooks ticker, and with
// -webhooks-allow-local a plain-HTTP receiver on loopback gets the events;
// stopping it waits for the loop to end. The ticker is real time (it is what
// is being tested), the events' times the fake clock's.
func TestDeliveriesRunAndStop(t *testing.T) {
	var got atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(webhooks.SignatureHeader) != "" {
			got.Add(1)
		}
	}))
	defer rcv.Close()
	e := apitest.New(t, nil)
	ctx := context.Background()
	e.Clock.Advance(time.Second)
	g := webhooks.Guard{AllowLocal: true}
	if _, err := webhooks.NewService(e.Store, e.Clock, g).Create(ctx, domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin},
		webhooks.CreateRequest{URL: rcv.URL + "/hook", Types: []string{"key.created"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.NewService(e.Store, e.Clock).CreateToken(ctx, domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}, "laptop", "cli"); err != nil {
		t.Fatal(err)
	}
	stop := startDeliveries(deps{ctx: ctx, store: e.Store, clock: e.Clock, log: apitest.DiscardLogger(), webhooks: 20 * time.Millisecond, allowLocalHooks: true})
	for deadline := time.Now().Add(time.Minute); got.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the receiver got nothing within a minute of 20 ms runs")
		}
	}
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("stopping the delivery job did not return")
	}
	if got.Load() != 1 {
		t.Fatalf("the receiver got %d deliveries", got.Load())
	}
}
