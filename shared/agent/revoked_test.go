package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// A revoked credential ends the agent: it stops its environments and Run
// returns ErrCredentialRefused, rather than registering again every second
// with a credential that can never work (each try counting against the
// node's address).
func TestRevokedCredentialEndsTheAgent(t *testing.T) {
	web := domain.Template{
		Name: "web", Command: []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", "8080"},
		Exports: map[string]domain.Export{"web": {Port: 8080}},
	}
	for _, tc := range []struct {
		name string
		// start returns the stack and what revoking does besides
		// marking the key (the keys service closes its sockets).
		start func(t *testing.T) (*stack, func())
	}{
		{"over HTTP", func(t *testing.T) (*stack, func()) { return newStack(t, web), func() {} }},
		{"over the node protocol", func(t *testing.T) (*stack, func()) {
			ss := newSocketStack(t, web)
			return ss.stack, ss.sockets.CloseAll
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, closeSockets := tc.start(t)
			ctx := context.Background()
			svc := nodes.NewService(s.Store, nil, s.Clock, nodes.Options{})
			admin := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin, Credential: domain.CredentialCLI}
			issued, err := svc.IssueCredential(ctx, admin, "local", "revoked agent")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			a, err := agent.New(agent.Config{
				API: s.url, Token: issued.Token, Address: "127.0.0.1", WorkDir: dir, Capacity: 2,
				Grace: time.Second, ReadyTimeout: time.Minute, ClaimWait: time.Second, Log: s.Log,
			})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(runCtx) }()

			id := s.lease(t, "web")
			s.wait(t, id, domain.StateReady)
			if _, err := s.Store.RevokeKey(ctx, issued.APIKey, s.Clock.Now()); err != nil {
				t.Fatal(err)
			}
			closeSockets()
			select {
			case err := <-done:
				if !errors.Is(err, agent.ErrCredentialRefused) {
					t.Fatalf("Run returned %v, want ErrCredentialRefused", err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("the agent kept running with a revoked credential")
			}
			if _, err := os.Stat(filepath.Join(dir, "envs", id)); !os.IsNotExist(err) {
				t.Fatalf("the environment's folder is left after the agent ended: %v", err)
			}
		})
	}
}

// A root agent on a node that cannot make namespaces refuses to start
// unless told it may run environments on the node's network: it never runs
// every tenant unconfined with only a warning.
func TestRootAgentWithoutNamespacesRefusesToStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the refusal is a root agent's; CI runs as root")
	}
	base := agent.Config{API: "http://127.0.0.1:1", Token: "els_node_x", Address: "127.0.0.1"}
	for _, tc := range []struct {
		name  string
		tune  func(*agent.Config)
		start bool
	}{
		{"refused", agent.CannotMakeNamespaces, false},
		{"allowed", agent.WithoutNamespaces, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.WorkDir = t.TempDir()
			tc.tune(&cfg)
			_, err := agent.New(cfg)
			if tc.start && err != nil {
				t.Fatalf("with AllowSharedNetwork: %v", err)
			}
			if !tc.start && (err == nil || !strings.Contains(err.Error(), "-allow-shared-network")) {
				t.Fatalf("without AllowSharedNetwork: %v, want a refusal naming -allow-shared-network", err)
			}
		})
	}
}
