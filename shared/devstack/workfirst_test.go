package devstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
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
	// A lease is counted as waiting just before it queues on the channel,
	// and a busy machine can stop it in between for any time: the next one
	// starts only once this one is parked in the channel's queue.
	queued := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); h.waiting.Load() < n || parkedLeases("devstack.TestWorkFirst.func") < int(n); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d leases wait, %d parked, want %d", h.waiting.Load(), parkedLeases("devstack.TestWorkFirst.func"), n)
			}
		}
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

// TestWorkFirstDropsLeaseOfGoneClient: over a real connection, a lease
// with a body that waits for its turn and whose client hangs up is never
// made; Go's server tells the handler only once the body was read.
func TestWorkFirstDropsLeaseOfGoneClient(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	var mu sync.Mutex
	var served []string
	wf := newWorkFirst(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		served = append(served, string(body))
		mu.Unlock()
		if string(body) == `{"n":1}` {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	}), 1)
	srv := httptest.NewServer(wf)
	defer srv.Close()
	defer letGo() // before the server closes, or it waits for the first lease forever
	post := func(body string) chan int {
		done := make(chan int, 1)
		go func() {
			r, err := http.Post(srv.URL+"/v1/environments", "application/json", strings.NewReader(body))
			if err != nil {
				done <- 0
				return
			}
			r.Body.Close()
			done <- r.StatusCode
		}()
		return done
	}
	first := post(`{"n":1}`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(served)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first lease was never served")
		}
	}
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"n":2}`
	fmt.Fprintf(conn, "POST /v1/environments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	waitFor("the second lease never waited", func() bool { return wf.waiting.Load() == 1 })
	conn.Close()
	waitFor("the second lease still waits after its client hung up", func() bool { return wf.waiting.Load() == 0 })
	letGo()
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("the first lease answered %d", code)
	}
	if code := <-post(`{"n":3}`); code != http.StatusCreated {
		t.Fatalf("the third lease answered %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`{"n":1}`, `{"n":3}`}; !slices.Equal(served, want) {
		t.Fatalf("served %q, want %q: a lease its client gave up on was made", served, want)
	}
}

// parkedLeases counts the goroutines of the test named by caller (a
// function in their stacks) parked in workFirst's select for a slot: a
// goroutine parks only once it is queued on the channel, whose blocked
// senders go in the order they queued.
func parkedLeases(caller string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	parked := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[select") && strings.Contains(g, "devstack.(*workFirst).ServeHTTP") && strings.Contains(g, caller) {
			parked++
		}
	}
	return parked
}
