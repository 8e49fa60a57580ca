package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/mcpserver"
)

// lostAnswers is an API whose leases are made but whose answers never
// arrive (502 each time): the session never learns the ids.
type lostAnswers struct {
	mu      sync.Mutex
	envs    []domain.Environment
	keys    map[string]bool
	deleted []string
}

func (a *lostAnswers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/environments":
		var req client.LeaseRequest
		json.NewDecoder(r.Body).Decode(&req)
		key := r.Header.Get("Idempotency-Key")
		if !a.keys[key] { // one environment per key, however often sent
			a.keys[key] = true
			a.envs = append(a.envs, domain.Environment{ID: "env_" + string(rune('a'+len(a.envs))), State: domain.StatePending, Labels: req.Labels})
		}
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte(`{"error":"the answer was lost","code":"unavailable"}`))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/environments":
		json.NewEncoder(w).Encode(map[string]any{"environments": a.envs})
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/environments/"):
		a.deleted = append(a.deleted, strings.TrimPrefix(r.URL.Path, "/v1/environments/"))
		w.Write([]byte(`{}`))
	default:
		http.NotFound(w, r)
	}
}

// wait_seconds beyond its bound is the tool's error, and nothing is leased;
// a lease whose answer was lost is found by the session's label at its end
// and deleted, while an environment of another session is left alone.
func TestLeaseLostAnswerIsCleanedUp(t *testing.T) {
	api := &lostAnswers{keys: map[string]bool{}, envs: []domain.Environment{{ID: "env_other", State: domain.StateReady, Labels: map[string]string{mcpserver.SessionLabel: "someoneelse"}}}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, err := client.New(srv.URL, "els_cli_test", client.WithHTTPClient(srv.Client()), client.WithMaxAttempts(3),
		client.WithSleep(func(context.Context, time.Duration) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	s := mcpserver.New(c, mcpserver.Options{})
	ctx := t.Context()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	lease := func(args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lease", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			t.Fatalf("lease %v succeeded", args)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if msg := lease(map[string]any{"template": "box", "wait_seconds": 601}); !strings.Contains(msg, "wait_seconds") {
		t.Errorf("wait_seconds 601: %q", msg)
	}
	if len(api.envs) != 1 {
		t.Fatalf("a refused wait leased: %+v", api.envs)
	}
	if msg := lease(map[string]any{"template": "box", "labels": map[string]string{"team": "web"}}); !strings.Contains(msg, "lost") {
		t.Errorf("a lost answer: %q", msg)
	}
	if len(api.envs) != 2 || api.envs[1].Labels["team"] != "web" || api.envs[1].Labels[mcpserver.SessionLabel] == "" {
		t.Fatalf("leased %+v, want one environment with its labels and the session's", api.envs)
	}
	cs.Close()
	s.Close()
	api.mu.Lock()
	defer api.mu.Unlock()
	if strings.Join(api.deleted, " ") != api.envs[1].ID {
		t.Errorf("deleted %v at the session's end, want only %s", api.deleted, api.envs[1].ID)
	}
}
