package environments_test

import (
	"net/http"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
)

// watching is the store's change signal, telling the test when a wait has
// begun to watch.
type watching struct {
	st      *store.Store
	started chan string
}

func (w *watching) WatchEnvironment(org, id string) (<-chan struct{}, func()) {
	ch, stop := w.st.WatchEnvironment(org, id)
	w.started <- id
	return ch, stop
}

// newWaitEnv is the test stack whose environments service wakes its waits
// on the store's change signal.
func newWaitEnv(t *testing.T) (*apitest.Env, *watching) {
	w := &watching{started: make(chan string, 16)}
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		w.st = e.Store
		return [][]httpapi.Route{environments.Routes(environments.NewService(e.Store, e.Clock, environments.WithChanges(w)))}
	})
	return e, w
}

// A read that waits for ready is answered when the state changes: here a
// delete stops the pending environment while the read waits (its timeout
// is far off), and the answer is the stopped environment.
func TestWaitIsAnsweredWhenTheStateChanges(t *testing.T) {
	e, w := newWaitEnv(t)
	id := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment["id"].(string)
	for _, q := range []string{"?wait=ready&timeout=8s", "?wait=change&timeout=8s", "?wait=change&state=pending"} {
		id := id
		if q != "?wait=ready&timeout=8s" {
			id = lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment["id"].(string)
		}
		answer := make(chan *apitest.Response, 1)
		go func() { answer <- e.Do(http.MethodGet, "/v1/environments/"+id+q, apitest.AliceToken, nil) }()
		if got := <-w.started; got != id {
			t.Fatalf("%s: watched %s", q, got)
		}
		if r := e.Do(http.MethodDelete, "/v1/environments/"+id, apitest.AliceToken, nil); r.Status != http.StatusOK {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		r := <-answer
		if r.Status != http.StatusOK || r.Map(t)["state"] != "stopped" || r.Map(t)["id"] != id {
			t.Fatalf("%s: %d %s", q, r.Status, r.Body)
		}
	}
}

// A wait whose environment does not change is answered at its timeout with
// the environment as it is; one already past what it waits for at once.
func TestWaitAnswersTheEnvironmentAsItIs(t *testing.T) {
	e, _ := newWaitEnv(t)
	id := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment["id"].(string)
	for q, want := range map[string]string{
		"?wait=ready&timeout=50ms":            "pending",
		"?wait=change&timeout=1ms":            "pending",
		"?wait=change&state=ready&timeout=8s": "pending", // already not ready
		"":                                    "pending",
	} {
		r := e.Do(http.MethodGet, "/v1/environments/"+id+q, apitest.AliceToken, nil)
		if r.Status != http.StatusOK || r.Map(t)["state"] != want {
			t.Fatalf("%q: %d %s", q, r.Status, r.Body)
		}
	}
	e.Do(http.MethodDelete, "/v1/environments/"+id, apitest.AliceToken, nil)
	r := e.Do(http.MethodGet, "/v1/environments/"+id+"?wait=ready&timeout=8s", apitest.AliceToken, nil)
	if r.Status != http.StatusOK || r.Map(t)["state"] != "stopped" {
		t.Fatalf("a stopped environment's wait for ready: %d %s", r.Status, r.Body)
	}
}

func TestWaitQueryRefusals(t *testing.T) {
	e, _ := newWaitEnv(t)
	id := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment["id"].(string)
	for _, q := range []string{
		"?wait=stopped", "?wait=ready&timeout=9s", "?wait=ready&timeout=0s", "?wait=ready&timeout=soon",
		"?state=ready", "?timeout=1s", "?wait=ready&state=ready", "?wait=change&state=asleep", "?wait=%zz",
	} {
		r := e.Do(http.MethodGet, "/v1/environments/"+id+q, apitest.AliceToken, nil)
		if r.Status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", q, r.Status, r.Body)
		}
	}
	// Another organization's environment is not found, waiting or not.
	if r := e.Do(http.MethodGet, "/v1/environments/"+id+"?wait=ready&timeout=8s", apitest.CarolToken, nil); r.Status != http.StatusNotFound {
		t.Fatalf("another organization's wait: %d %s", r.Status, r.Body)
	}
}

// Without a change signal (a Lambda: the writers are other processes) the
// wait re-reads on a timer, and still answers the change: here a node's
// write the service does not see.
func TestWaitWithoutASignalReadsAgain(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment["id"].(string)
	answer := make(chan *apitest.Response, 1)
	go func() {
		answer <- e.Do(http.MethodGet, "/v1/environments/"+id+"?wait=change&state=pending&timeout=8s", apitest.AliceToken, nil)
	}()
	setState(t, e, id, "starting", "node_1")
	if r := <-answer; r.Status != http.StatusOK || r.Map(t)["state"] != "starting" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
}
