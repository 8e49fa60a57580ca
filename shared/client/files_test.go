package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/envfiles"
)

// movingNode is an API that hands out files tickets and a node that takes
// only the newest: an older ticket gets the answer of node that no longer
// holds the environment (it paused and woke elsewhere), or of a request
// that is refused for itself.
type movingNode struct {
	mu      sync.Mutex
	issued  int
	stale   envfiles.Error // what the node answers an older ticket
	node    string
	tickets []string // the tickets the node saw, in order
	bodies  []string
}

func (m *movingNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/environments/env_1/files":
		m.issued++
		json.NewEncoder(w).Encode(client.FilesTicket{URL: m.node, Ticket: fmt.Sprintf("t%d", m.issued), Expires: time.Now().Add(5 * time.Minute), Write: true})
	case strings.HasSuffix(r.URL.Path, "/touch"):
		w.Write([]byte(`{}`))
	case strings.HasPrefix(r.URL.Path, "/node/"):
		tk := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		m.tickets = append(m.tickets, tk)
		b, _ := io.ReadAll(r.Body)
		m.bodies = append(m.bodies, string(b))
		if tk != fmt.Sprintf("t%d", m.issued) || m.stale.Reason == envfiles.ReasonNotFound {
			w.WriteHeader(m.stale.Status)
			json.NewEncoder(w).Encode(m.stale)
			return
		}
		json.NewEncoder(w).Encode(envfiles.FileInfo{Name: "f", Size: int64(len(b))})
	default:
		http.NotFound(w, r)
	}
}

func TestFilesDropsARefusedTicket(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stale envfiles.Error
		// sent is the tickets the node sees (the move issues t2 to no one);
		// fails, whether it fails.
		sent  []string
		fails bool
	}{
		{"environment gone", *envfiles.Errorf(envfiles.ReasonEnvironmentGone, "gone"), []string{"t1", "t1", "t3"}, false},
		{"ticket refused", *envfiles.Errorf(envfiles.ReasonTicket, "bad ticket"), []string{"t1", "t1", "t3"}, false},
		{"no such environment", envfiles.Error{Message: "404 page not found", Status: 404}, []string{"t1", "t1", "t3"}, false},
		{"gone", envfiles.Error{Message: "gone", Status: 410}, []string{"t1", "t1", "t3"}, false},
		// A missing file is the request's answer: the ticket stays.
		{"missing file", *envfiles.Errorf(envfiles.ReasonNotFound, "no such file"), []string{"t1", "t1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &movingNode{stale: tc.stale}
			c, _ := newClient(t, m)
			srv := httptest.NewServer(m)
			t.Cleanup(srv.Close)
			m.node = srv.URL + "/node"
			f := c.Files("env_1")
			ctx := t.Context()
			f.Stat(ctx, "/a") // takes ticket t1
			m.mu.Lock()
			m.issued++ // the environment moved: the node takes only t2 now
			m.mu.Unlock()
			_, err := f.Stat(ctx, "/a")
			if (err != nil) != tc.fails {
				t.Fatalf("stat after the move: %v, want failed %v", err, tc.fails)
			}
			if got := strings.Join(m.tickets, " "); got != strings.Join(tc.sent, " ") {
				t.Errorf("tickets sent: %s, want %s", got, strings.Join(tc.sent, " "))
			}
		})
	}
}

// A write whose body seeks is sent again whole with the fresh ticket; one
// whose body does not is not sent again, but its ticket is dropped.
func TestFilesWriteRetriesWithAFreshTicket(t *testing.T) {
	m := &movingNode{stale: *envfiles.Errorf(envfiles.ReasonEnvironmentGone, "gone")}
	c, _ := newClient(t, m)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	m.node = srv.URL + "/node"
	f := c.Files("env_1")
	ctx := t.Context()
	if _, err := f.Write(ctx, "/a", strings.NewReader("one"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.issued++
	m.mu.Unlock()
	if fi, err := f.Write(ctx, "/a", strings.NewReader("hello"), client.WriteOptions{}); err != nil || fi.Size != 5 {
		t.Fatalf("write after the move: %+v %v", fi, err)
	}
	m.mu.Lock()
	m.issued++
	m.mu.Unlock()
	_, err := f.Write(ctx, "/a", io.MultiReader(strings.NewReader("streamed")), client.WriteOptions{})
	var fe *envfiles.Error
	if !errors.As(err, &fe) || fe.Reason != envfiles.ReasonEnvironmentGone {
		t.Fatalf("a stream that cannot be sent again: %v, want the node's answer", err)
	}
	if _, err := f.Write(ctx, "/a", io.MultiReader(strings.NewReader("again")), client.WriteOptions{}); err != nil {
		t.Fatalf("the next write, with a fresh ticket: %v", err)
	}
	want := "t1:one t1:hello t3:hello t3:streamed t5:again"
	var got []string
	for i := range m.tickets {
		got = append(got, m.tickets[i]+":"+m.bodies[i])
	}
	if strings.Join(got, " ") != want {
		t.Errorf("sent %s, want %s", strings.Join(got, " "), want)
	}
}

// A node that cannot be reached (the environment's old node, gone) drops
// the ticket too: the fresh one names the node it runs on now.
func TestFilesUnreachableNodeTakesAFreshTicket(t *testing.T) {
	m := &movingNode{stale: *envfiles.Errorf(envfiles.ReasonEnvironmentGone, "gone")}
	c, _ := newClient(t, m)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	m.node = gone.URL + "/node"
	gone.Close()
	f := c.Files("env_1")
	ctx := t.Context()
	if _, err := f.Stat(ctx, "/a"); err == nil {
		t.Fatal("a stat on a node that is gone succeeded")
	}
	m.mu.Lock()
	m.node = srv.URL + "/node"
	m.mu.Unlock()
	if _, err := f.Stat(ctx, "/a"); err != nil {
		t.Fatalf("a stat after the node moved: %v", err)
	}
	if got := strings.Join(m.tickets, " "); got != "t3" {
		t.Errorf("tickets the live node saw: %s, want t3 (t1 and t2 went to the node that is gone)", got)
	}
}
