package devstack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestWorkFirst: new leases are served n at a time in the order they came;
// every other request, a lease's later steps among them, passes at once;
// a waiting lease whose client went away is never served.
func TestWorkFirst(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var served []string
	h := newWorkFirst(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.Method+" "+r.URL.Path+" "+r.Header.Get("X-N"))
		mu.Unlock()
		if r.Header.Get("X-Hold") != "" {
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}), 1)
	do := func(ctx context.Context, method, path, n string, hold bool) chan int {
		done := make(chan int, 1)
		go func() {
			r := httptest.NewRequestWithContext(ctx, method, path, nil)
			r.Header.Set("X-N", n)
			if hold {
				r.Header.Set("X-Hold", "1")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			done <- w.Code
		}()
		return done
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(served) }
	waitCount := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); count() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("served %d, want %d: %v", count(), n, served)
			}
		}
	}

	first := do(context.Background(), http.MethodPost, "/v1/environments", "1", true)
	waitCount(1)
	// Queued behind the first, in order; the second's client goes away.
	gone, cancel := context.WithCancel(context.Background())
	queued := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); h.waiting.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d leases wait, want %d", h.waiting.Load(), n)
			}
		}
		// From counted to queued on the channel is a few instructions.
		time.Sleep(5 * time.Millisecond)
	}
	second := do(gone, http.MethodPost, "/v1/environments", "2", false)
	queued(1)
	third := do(context.Background(), http.MethodPost, "/v1/environments", "3", false)
	queued(2)
	fourth := do(context.Background(), http.MethodPost, "/v1/environments", "4", false)
	queued(3)
	cancel()
	if code := <-second; code != http.StatusOK { // the recorder's default: nothing written
		t.Fatalf("a lease whose client went away answered %d", code)
	}
	// Other requests are not held: a lease's wait, exec and the node's
	// reports pass while a new lease is being made.
	for i, path := range []string{"/v1/environments/env_1", "/v1/environments/env_1/exec", "/v1/nodes/n1/claim"} {
		method := http.MethodGet
		if i > 0 {
			method = http.MethodPost
		}
		if code := <-do(context.Background(), method, path, "", false); code != http.StatusNoContent {
			t.Fatalf("%s %s answered %d while a lease was made", method, path, code)
		}
	}
	close(release)
	for _, c := range []chan int{first, third, fourth} {
		if code := <-c; code != http.StatusNoContent {
			t.Fatalf("a lease answered %d", code)
		}
	}
	want := []string{"POST /v1/environments 1", "GET /v1/environments/env_1 ", "POST /v1/environments/env_1/exec ",
		"POST /v1/nodes/n1/claim ", "POST /v1/environments 3", "POST /v1/environments 4"}
	mu.Lock()
	defer mu.Unlock()
	if len(served) != len(want) {
		t.Fatalf("served %q, want %q", served, want)
	}
	for i := range want {
		if served[i] != want[i] {
			t.Fatalf("served %q, want %q", served, want)
		}
	}
}
