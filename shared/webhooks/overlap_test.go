package webhooks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/webhooks"
)

// holdingJob is s's job with a POST timeout of a minute: the receiver holds
// the first run's POST until the second run has ended, and a loaded machine
// must not turn that hold into a timeout (the default is 10 s).
func holdingJob(s *stack, rcv *httptest.Server) *webhooks.Job {
	return webhooks.NewJob(s.Store, s.Clock, s.Log, webhooks.Options{Guard: webhooks.Guard{AllowLocal: true},
		TLS: rcv.Client().Transport.(*http.Transport).TLSClientConfig, Timeout: time.Minute})
}

// Two runs that overlap (the scheduled one and one woken by the table's
// stream) POST a new event once: the run that fans it out tries its
// delivery, and the other, reading the outbox while that POST is in flight,
// finds the event gone and the delivery held, not due.
func TestOverlappingRunsPostOnce(t *testing.T) {
	var posts atomic.Int32
	inFlight := make(chan struct{})
	release := make(chan struct{})
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if posts.Add(1) == 1 {
			close(inFlight)
			<-release
		}
	}))
	defer rcv.Close()
	s := newStack(t, &receiver{Server: rcv}, true)
	s.job = holdingJob(s, rcv)
	hook := s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": rcv.URL + "/hook", "types": []string{"key."}}, 201)["webhook"].(map[string]any)["id"].(string)
	s.must("POST", "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"}, 201)

	first := make(chan webhooks.Summary)
	go func() {
		sum, err := s.job.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		first <- sum
	}()
	<-inFlight
	second := s.run()
	close(release)
	sum := <-first
	if sum.FannedOut < 1 || sum.Succeeded != 1 || second.Created != 0 || second.Succeeded+second.Retrying+second.Failed != 0 {
		t.Fatalf("first run %+v, second run %+v", sum, second)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the receiver got %d POSTs of one event", n)
	}
	d := s.deliveries(hook)
	if len(d) != 1 || d[0].State != domain.DeliverySucceeded || len(d[0].Attempts) != 1 {
		t.Fatalf("deliveries: %+v", d)
	}
}

// The same for a retry that fell due: the run that claims it POSTs it, and
// an overlapping run finds it held.
func TestOverlappingRunsRetryOnce(t *testing.T) {
	var posts atomic.Int32
	inFlight := make(chan struct{})
	release := make(chan struct{})
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch posts.Add(1) {
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
		case 2:
			close(inFlight)
			<-release
		}
	}))
	defer rcv.Close()
	s := newStack(t, &receiver{Server: rcv}, true)
	s.job = holdingJob(s, rcv)
	hook := s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": rcv.URL + "/hook", "types": []string{"key."}}, 201)["webhook"].(map[string]any)["id"].(string)
	s.must("POST", "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"}, 201)
	if sum := s.run(); sum.Retrying != 1 {
		t.Fatalf("first attempt: %+v", sum)
	}
	s.Clock.Advance(webhooks.FirstRetry)

	first := make(chan webhooks.Summary)
	go func() {
		sum, err := s.job.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		first <- sum
	}()
	<-inFlight
	second := s.run()
	close(release)
	sum := <-first
	if sum.Succeeded != 1 || second.Succeeded+second.Retrying+second.Failed != 0 {
		t.Fatalf("first run %+v, second run %+v", sum, second)
	}
	if n := posts.Load(); n != 2 {
		t.Fatalf("the receiver got %d POSTs (one 500, one retry), want 2", n)
	}
	d := s.deliveries(hook)
	if len(d) != 1 || d[0].State != domain.DeliverySucceeded || len(d[0].Attempts) != 2 || d[0].NextTry != nil {
		t.Fatalf("deliveries: %+v", d)
	}
}
