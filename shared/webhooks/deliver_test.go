package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
	"github.com/envlease/envlease/shared/webhooks/example"
)

var _ webhooks.Store = (*store.Store)(nil)

// receiver is a local HTTPS receiver that answers the statuses given, in
// turn (the last one from then on), and keeps what it got.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []*http.Request
	bodies   [][]byte
	// onRequest runs in the handler, after the request is counted; drop
	// makes the handler then close the connection without an answer.
	onRequest func()
	drop      bool
}

func newReceiver(t testing.TB, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.got)
		r.got = append(r.got, req)
		r.bodies = append(r.bodies, body)
		st := r.statuses[min(n, len(r.statuses)-1)]
		on, drop := r.onRequest, r.drop
		r.mu.Unlock()
		if on != nil {
			on()
		}
		if drop {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(st)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

type stack struct {
	*apitest.Env
	job *webhooks.Job
}

// newStack serves keys, events and webhooks, with loopback receivers allowed
// (the devserver's flag), and a delivery job that trusts rcv's certificate.
func newStack(t *testing.T, rcv *receiver, allowLocal bool) *stack {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		ks := keys.NewService(e.Store, e.Clock)
		return [][]httpapi.Route{
			keys.TokenRoutes(ks), keys.KeyRoutes(ks),
			events.Routes(events.NewService(e.Store, e.Clock)),
			webhooks.Routes(webhooks.NewService(e.Store, e.Clock, webhooks.Guard{AllowLocal: true})),
		}
	})
	opts := webhooks.Options{Guard: webhooks.Guard{AllowLocal: allowLocal}}
	if rcv != nil {
		opts.TLS = rcv.Client().Transport.(*http.Transport).TLSClientConfig
	}
	// Events of the fixture are older than any webhook.
	e.Clock.Advance(time.Second)
	return &stack{Env: e, job: webhooks.NewJob(e.Store, e.Clock, e.Log, opts)}
}

func (s *stack) must(method, path, token string, body any, status int) map[string]any {
	s.T.Helper()
	res := s.Do(method, path, token, body)
	if res.Status != status {
		s.T.Fatalf("%s %s: %d %s", method, path, res.Status, res.Body)
	}
	if len(res.Body) == 0 {
		return nil
	}
	return res.Map(s.T)
}

func (s *stack) run() webhooks.Summary {
	s.T.Helper()
	sum, err := s.job.Run(context.Background())
	if err != nil {
		s.T.Fatalf("delivery job: %v", err)
	}
	return sum
}

func (s *stack) deliveries(hook string) []domain.Delivery {
	s.T.Helper()
	var page domain.DeliveryPage
	s.Do("GET", "/v1/webhooks/"+hook+"/deliveries", apitest.AliceToken, nil).JSON(s.T, &page)
	return page.Deliveries
}

// A receiver that answers 500 twice and then 200 gets the event three
// times, 30 s and then 60 s apart on the job's clock, each POST signed so
// that the documented receiver code (docs/events.md) accepts it.
func TestDeliveryRetriesWithBackoff(t *testing.T) {
	rcv := newReceiver(t, 500, 500, 200)
	s := newStack(t, rcv, true)
	created := s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": rcv.URL + "/hook", "types": []string{"key."}}, 201)
	secret := created["secret"].(string)
	hook := created["webhook"].(map[string]any)["id"].(string)
	if !strings.HasPrefix(secret, webhooks.SecretPrefix) {
		t.Fatalf("secret %q", secret)
	}
	if res := s.Do("GET", "/v1/webhooks", apitest.AliceToken, nil); strings.Contains(string(res.Body), secret) {
		t.Fatal("the listing shows the secret")
	}
	tok := s.must("POST", "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"}, 201)
	keyID := tok["apiKey"].(map[string]any)["id"].(string)

	start := s.Clock.Now()
	if sum := s.run(); sum.FannedOut < 1 || sum.Created != 1 || sum.Retrying != 1 || rcv.count() != 1 {
		t.Fatalf("first run: %+v, receiver got %d", sum, rcv.count())
	}
	d := s.deliveries(hook)
	if len(d) != 1 || d[0].State != domain.DeliveryPending || d[0].LastCode != 500 || d[0].NextTry == nil || !d[0].NextTry.Equal(start.Add(30*time.Second)) {
		t.Fatalf("after the first 500: %+v", d)
	}
	// Not due yet: nothing is sent.
	s.Clock.Advance(29 * time.Second)
	s.run()
	if rcv.count() != 1 {
		t.Fatalf("sent before its next try: %d", rcv.count())
	}
	s.Clock.Advance(time.Second)
	s.run()
	if rcv.count() != 2 {
		t.Fatalf("second try: receiver got %d", rcv.count())
	}
	d = s.deliveries(hook)
	if !d[0].NextTry.Equal(start.Add(90 * time.Second)) {
		t.Fatalf("after the second 500 the next try is %v, want 60 s later", d[0].NextTry)
	}
	s.Clock.Advance(60 * time.Second)
	s.run()
	if rcv.count() != 3 {
		t.Fatalf("third try: receiver got %d", rcv.count())
	}
	d = s.deliveries(hook)
	if d[0].State != domain.DeliverySucceeded || d[0].LastCode != 200 || len(d[0].Attempts) != 3 || d[0].NextTry != nil {
		t.Fatalf("after the 200: %+v", d[0])
	}
	for i, want := range []time.Duration{0, 30 * time.Second, 90 * time.Second} {
		if !d[0].Attempts[i].At.Equal(start.Add(want)) {
			t.Errorf("attempt %d at %v, want %v", i, d[0].Attempts[i].At, start.Add(want))
		}
	}
	// Later runs send nothing more.
	s.Clock.Advance(time.Hour)
	s.run()
	if rcv.count() != 3 {
		t.Fatalf("a succeeded delivery was sent again: %d", rcv.count())
	}

	for i, req := range rcv.got {
		body := rcv.bodies[i]
		if err := example.Verify(secret, req.Header.Get(webhooks.SignatureHeader), body, start.Add([]time.Duration{0, 30 * time.Second, 90 * time.Second}[i]), 5*time.Minute); err != nil {
			t.Errorf("delivery %d: the documented receiver refuses it: %v", i, err)
		}
		if err := example.Verify("whsec_wrong", req.Header.Get(webhooks.SignatureHeader), body, start, 5*time.Minute); err == nil {
			t.Error("another secret verified")
		}
		tampered := append([]byte{}, body...)
		tampered[len(tampered)-2] ^= 1
		if err := example.Verify(secret, req.Header.Get(webhooks.SignatureHeader), tampered, start, 5*time.Minute); err == nil {
			t.Error("a tampered body verified")
		}
		if err := example.Verify(secret, req.Header.Get(webhooks.SignatureHeader), body, start.Add(time.Hour), 5*time.Minute); err == nil || !strings.Contains(err.Error(), "stale") {
			t.Errorf("a stale delivery was not refused as stale: %v", err)
		}
		var ev domain.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != domain.EventKeyCreated || ev.Subject.ID != keyID || ev.Actor != (domain.Actor{Kind: "user", ID: "bob"}) ||
			req.Header.Get(webhooks.EventIDHeader) != ev.ID || req.Header.Get(webhooks.EventTypeHeader) != ev.Type ||
			req.Header.Get(webhooks.DeliveryHeader) != d[0].ID || req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("delivery %d: %s %v", i, body, req.Header)
		}
	}
}

// A receiver that never succeeds is tried for 24 hours; then the delivery
// has failed, the webhook is disabled with a webhook.disabled event (which
// names the URL's host, never its path), and later events are held, not
// sent. A retry by hand turns it back on and sends the held ones too.
func TestFailingWebhookIsDisabled(t *testing.T) {
	rcv := newReceiver(t, 503)
	s := newStack(t, rcv, true)
	hook := s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": rcv.URL + "/in/tok_s3cret", "types": []string{"*"}}, 201)["webhook"].(map[string]any)["id"].(string)
	s.must("POST", "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"}, 201)
	start := s.Clock.Now()
	// oldest is the key.created delivery (the listing is newest first; the
	// webhook.disabled event, which the webhook wants too, may get one later).
	oldest := func() domain.Delivery { d := s.deliveries(hook); return d[len(d)-1] }
	for i := 0; i < 40; i++ {
		s.run()
		if d := oldest(); d.State != domain.DeliveryPending {
			break
		}
		s.Clock.Set(*oldest().NextTry)
	}
	d := []domain.Delivery{oldest()}
	if d[0].Type != domain.EventKeyCreated || d[0].State != domain.DeliveryFailed {
		t.Fatalf("deliveries: %+v", d)
	}
	last := d[0].Attempts[len(d[0].Attempts)-1].At
	if last.Sub(start) > webhooks.RetryWindow || last.Sub(start) < 12*time.Hour {
		t.Fatalf("last attempt %v after the first, want within 24 h and near its end", last.Sub(start))
	}
	t.Logf("%d attempts over %v", len(d[0].Attempts), last.Sub(start))
	if rcv.count() != len(d[0].Attempts) {
		t.Fatalf("receiver got %d, attempts recorded %d", rcv.count(), len(d[0].Attempts))
	}
	var hooks struct{ Webhooks []domain.Webhook }
	s.Do("GET", "/v1/webhooks", apitest.AliceToken, nil).JSON(t, &hooks)
	if hooks.Webhooks[0].State != domain.WebhookDisabled || hooks.Webhooks[0].DisabledReason == "" {
		t.Fatalf("webhook: %+v", hooks.Webhooks[0])
	}
	var evs domain.EventPage
	res := s.Do("GET", "/v1/events?type=webhook.disabled", apitest.BobToken, nil)
	res.JSON(t, &evs)
	if len(evs.Events) != 1 || evs.Events[0].Subject.ID != hook || evs.Events[0].Actor.Kind != "system" {
		t.Fatalf("webhook.disabled events: %+v", evs.Events)
	}
	if data := evs.Events[0].Data; data["webhook"] != hook || data["host"] != "127.0.0.1" || data["url"] != nil || strings.Contains(string(res.Body), "s3cret") {
		t.Fatalf("webhook.disabled data: %v", data)
	}
	// Disabled: new events are held, not sent (the webhook.disabled event
	// too, as the webhook wants every type).
	for i := range 3 {
		s.must("POST", "/v1/tokens", apitest.BobToken, map[string]any{"name": fmt.Sprintf("second%d", i)}, 201)
	}
	n := rcv.count()
	sum := s.run()
	d = s.deliveries(hook)
	if rcv.count() != n || len(d) != 5 || sum.Held < 3 {
		t.Fatalf("a disabled webhook: receiver got %d (had %d), run %+v, deliveries %+v", rcv.count(), n, sum, d)
	}
	for _, x := range d[:4] {
		if x.State != domain.DeliveryHeld || x.NextTry != nil || len(x.Attempts) != 0 {
			t.Fatalf("while disabled: %+v", x)
		}
	}
	// A retry by hand enables it and queues the delivery and the held ones, due now.
	rcv.mu.Lock()
	rcv.statuses = []int{204}
	rcv.mu.Unlock()
	out := s.must("POST", "/v1/webhooks/"+hook+"/deliveries/"+d[4].ID+"/retry", apitest.AliceToken, nil, 200)
	if out["delivery"].(map[string]any)["state"] != "pending" {
		t.Fatalf("retry: %v", out)
	}
	s.run()
	d = s.deliveries(hook)
	for _, x := range d {
		if x.State != domain.DeliverySucceeded || x.LastCode != 204 {
			t.Fatalf("after the retry: %+v", x)
		}
	}
	if rcv.count() != n+5 {
		t.Fatalf("after the retry the receiver got %d more, want 5", rcv.count()-n)
	}
	s.Do("GET", "/v1/webhooks", apitest.AliceToken, nil).JSON(t, &hooks)
	if hooks.Webhooks[0].State != domain.WebhookEnabled {
		t.Fatalf("webhook after the retry: %+v", hooks.Webhooks[0])
	}
}

// The check at delivery is on the address dialed: a webhook whose name
// resolved to a public address when it was created, and to loopback now (a
// DNS rebind), is refused without a byte sent.
func TestDeliveryRefusesRebind(t *testing.T) {
	rcv := newReceiver(t, 200)
	s := newStack(t, rcv, false)
	port := rcv.URL[strings.LastIndex(rcv.URL, ":")+1:]
	w := domain.Webhook{ID: "whk_rebind", OrgID: "acme", URL: "https://localhost:" + port + "/hook", Types: []string{"*"},
		State: domain.WebhookEnabled, Created: s.Clock.Now(), CreatedBy: "alice", Secret: webhooks.NewSecret(), SecretPrefix: "whsec_"}
	if err := s.Store.PutWebhook(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	s.must("POST", "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"}, 201)
	s.run()
	if rcv.count() != 0 {
		t.Fatal("a delivery reached a loopback receiver")
	}
	d := s.deliveries(w.ID)
	if len(d) != 1 || d[0].State != domain.DeliveryPending || !strings.Contains(d[0].LastError, "not public") || d[0].LastCode != 0 {
		t.Fatalf("deliveries: %+v", d)
	}
}

// Admins only; URLs and types are checked.
func TestWebhookAPI(t *testing.T) {
	s := newStack(t, nil, true)
	for _, c := range []struct {
		token  string
		body   map[string]any
		status int
	}{
		{apitest.BobToken, map[string]any{"url": "https://hooks.example.com", "types": []string{"*"}}, 403},
		{apitest.AliceToken, map[string]any{"url": "https://127.0.0.1.nip.invalid", "types": []string{"*"}}, 422},
		{apitest.AliceToken, map[string]any{"url": "https://10.0.0.1/x", "types": []string{"*"}}, 422},
		{apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"environment.bogus"}}, 422},
		{apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{}}, 422},
		{apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"*"}, "secret": "x"}, 400},
	} {
		if res := s.Do("POST", "/v1/webhooks", c.token, c.body); res.Status != c.status {
			t.Errorf("%v: %d %s, want %d", c.body, res.Status, res.Body, c.status)
		}
	}
	// At the limits: the longest URL and the most types.
	long := "https://127.0.0.1/" + strings.Repeat("a", webhooks.MaxURLLen-len("https://127.0.0.1/"))
	many := append([]string{}, domain.EventTypes...)
	for _, k := range []string{"environment.", "artifact.", "key.", "sandbox.", "quota.", "node.", "webhook.", "*"} {
		many = append(many, k)
	}
	if len(many) > webhooks.MaxTypes {
		t.Fatalf("every event type and kind prefix (%d) do not fit in one webhook (%d)", len(many), webhooks.MaxTypes)
	}
	for len(many) < webhooks.MaxTypes {
		many = append(many, domain.EventTypes[len(many)%len(domain.EventTypes)]) // repeats are allowed, and kept once
	}
	s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": long, "types": many}, 201)
	if res := s.Do("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": long + "a", "types": []string{"*"}}); res.Status != 422 {
		t.Fatalf("a URL past the limit: %d", res.Status)
	}
	if res := s.Do("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": long, "types": append(many, "*")}); res.Status != 422 {
		t.Fatalf("types past the limit: %d", res.Status)
	}
	id := s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/x", "types": []string{"environment.", "quota.refused"}}, 201)["webhook"].(map[string]any)["id"].(string)
	// At most MaxWebhooks per organization.
	for range webhooks.MaxWebhooks - 2 {
		s.must("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/y", "types": []string{"*"}}, 201)
	}
	if res := s.Do("POST", "/v1/webhooks", apitest.AliceToken, map[string]any{"url": "https://127.0.0.1/z", "types": []string{"*"}}); res.Status != 409 {
		t.Fatalf("webhook %d: %d %s", webhooks.MaxWebhooks+1, res.Status, res.Body)
	}
	if res := s.Do("GET", "/v1/webhooks", apitest.CarolToken, nil); !strings.Contains(string(res.Body), `"webhooks":[]`) {
		t.Fatalf("another organization sees the webhook: %s", res.Body)
	}
	if res := s.Do("GET", "/v1/webhooks/"+id+"/deliveries?cursor=abc", apitest.AliceToken, nil); res.Status != 400 {
		t.Fatalf("bad cursor: %d", res.Status)
	}
	if res := s.Do("DELETE", "/v1/webhooks/"+id, apitest.CarolToken, nil); res.Status != 404 {
		t.Fatalf("delete by another organization: %d", res.Status)
	}
	s.must("DELETE", "/v1/webhooks/"+id, apitest.AliceToken, nil, 204)
	if res := s.Do("DELETE", "/v1/webhooks/"+id, apitest.AliceToken, nil); res.Status != 404 {
		t.Fatalf("delete again: %d", res.Status)
	}
}

// docs/events.md shows the receiver code of package example verbatim.
func TestDocsShowReceiverCode(t *testing.T) {
	code, err := os.ReadFile("example/verify.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```go\n"+string(code)+"```\n") {
		t.Fatal("docs/events.md does not show shared/webhooks/example/verify.go verbatim in a ```go block")
	}
}

// The documented Receiver, served as a receiver would, accepts a delivery
// signed now and refuses a stale, a forged and a tampered one.
func TestDocumentedReceiver(t *testing.T) {
	secret := webhooks.NewSecret()
	var got [][]byte
	srv := httptest.NewServer(example.Receiver(secret, func(ev []byte) error {
		got = append(got, ev)
		return nil
	}))
	defer srv.Close()
	body := []byte(`{"id":"evt_x","type":"environment.stopped"}`)
	post := func(sig string, b []byte) int {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(string(b)))
		req.Header.Set(webhooks.SignatureHeader, sig)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	now := time.Now()
	for _, c := range []struct {
		name   string
		sig    string
		body   []byte
		status int
	}{
		{"signed now", webhooks.Sign(secret, now, body), body, 204},
		{"stale", webhooks.Sign(secret, now.Add(-10*time.Minute), body), body, 400},
		{"from the future", webhooks.Sign(secret, now.Add(10*time.Minute), body), body, 400},
		{"another secret", webhooks.Sign(webhooks.NewSecret(), now, body), body, 400},
		{"tampered", webhooks.Sign(secret, now, body), append([]byte(`{"x":1,`), body[1:]...), 400},
		{"no header", "", body, 400},
		{"garbage", "t=abc,v1=zz", body, 400},
	} {
		if st := post(c.sig, c.body); st != c.status {
			t.Errorf("%s: %d, want %d", c.name, st, c.status)
		}
	}
	if len(got) != 1 || string(got[0]) != string(body) {
		t.Fatalf("handled %q", got)
	}
}
