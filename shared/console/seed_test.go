package console_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// The data a real organization has after a few weeks, for the tests that
// check the pages fit and take the documentation's screenshots: long names
// and labels with no place to break them (branches, URLs, commit ids),
// twenty keys, a failed environment with its kept log, a checkpoint, an
// artifact with a long name, a sandbox and the events all of that made.
const (
	longTemplate = "payments-integration-tests"
	longEnvName  = "payments-ledger-reconciliation-with-postgres-16-and-kafka-for-pull-request-4242-by-alice"
	// pausingTemplate pauses its environments 3 s after their last use.
	pausingTemplate = "agent-workspace"
	crashLine       = "error: services/payments/internal/ledger/reconciliation_test.go:128: expected 1204 settled transfers, got 1187"
)

// seedTemplates are the templates the seeded organization (acme) adds to
// the test fixture's: one with a long name and description, and one whose
// command fails with a long, unbroken line of output (its kept log).
func seedTemplates() clienttest.Option {
	hour := domain.Duration(time.Hour)
	return clienttest.WithTemplates("acme",
		domain.Template{
			Name: longTemplate, Runtime: domain.RuntimeProcess, Command: []string{"sleep", "3600"},
			Description: "Payments service with Postgres 16 and Kafka, for the integration tests of every pull request",
			Timeouts:    domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(8 * time.Hour)},
			Quota:       domain.Quota{MaxLeases: 8},
			Resources:   domain.Resources{CPUs: 1, Memory: "2Gi", PIDs: 512},
		},
		domain.Template{
			Name: "nightly-build", Runtime: domain.RuntimeProcess,
			Command:  []string{"sh", "-c", `for i in $(seq 1 40); do echo "step $i/40: go test ./services/payments/internal/ledger/reconciliation/... -run TestSettlement_$i -count=1"; done; echo "` + crashLine + `" >&2; exit 2`},
			Timeouts: domain.Timeouts{Idle: hour, Hard: hour},
			Quota:    domain.Quota{MaxLeases: 2},
		},
		domain.Template{
			Name: pausingTemplate, Runtime: domain.RuntimeProcess, Command: []string{"sleep", "3600"},
			Description: "An agent's workspace: paused when idle, its files kept until it is used again",
			Timeouts:    domain.Timeouts{Idle: domain.Duration(3 * time.Second), Hard: domain.Duration(8 * time.Hour)},
			Idle:        &domain.Idle{Action: domain.IdlePause, Retention: domain.Duration(168 * time.Hour)},
			Quota:       domain.Quota{MaxLeases: 2, MaxPaused: 4},
		})
}

// seeded is what seed made, for the pages to open.
type seeded struct {
	detail  string // a ready environment with a long name and labels
	crashed string // a failed one with a kept log
	paused  string // a paused one, with its checkpoint
}

func seed(t *testing.T, stack *clienttest.Stack) seeded {
	t.Helper()
	lease := func(token string, body map[string]any) string {
		var r struct {
			Environment struct {
				ID string `json:"id"`
			} `json:"environment"`
		}
		apiCall(t, stack.URL, token, "POST", "/v1/environments", body, &r)
		return r.Environment.ID
	}
	var s seeded
	s.detail = lease(clienttest.AliceToken, map[string]any{"template": longTemplate, "name": longEnvName, "labels": map[string]string{
		"branch": "feature/ledger-reconciliation-handles-partial-settlements-across-currencies",
		"pr":     "https://github.com/acme/payments/pull/4242",
		"commit": "9f2c4e7b1a0d8c6e5f4b3a2918d7c6b5a4f3e2d1",
		"team":   "payments",
	}})
	for i, name := range []string{"payments-e2e-eu-west-1-canary-release-2026-11-28", "review-app-for-the-new-checkout-flow-with-apple-pay", "alice-debugging-flaky-kafka-consumer-rebalance"} {
		lease(clienttest.BobToken, map[string]any{"template": longTemplate, "name": name, "labels": map[string]string{
			"branch": fmt.Sprintf("bob/experiment-%d-with-a-branch-name-that-goes-on-and-on-without-spaces", i), "team": "payments"}})
	}
	s.paused = lease(clienttest.BobToken, map[string]any{"template": pausingTemplate, "name": "agent-workspace-refactoring-the-settlement-batch-job",
		"labels": map[string]string{"task": "https://tracker.acme.example/PAY-1187"}})
	s.crashed = lease(clienttest.BobToken, map[string]any{"template": "nightly-build", "name": "nightly-build-2026-11-28-payments-and-ledger"})
	// Two short lives: their time is the usage page's, their stops the
	// events page's.
	for _, name := range []string{"quick-check-of-the-release-candidate", "sleeper-for-a-minute"} {
		id := lease(clienttest.BobToken, map[string]any{"template": "sleeper", "name": name})
		waitState(t, stack, id, domain.StateReady)
		apiCall(t, stack.URL, clienttest.BobToken, "DELETE", "/v1/environments/"+id, nil, nil)
	}
	waitState(t, stack, s.crashed, domain.StateFailed)
	waitState(t, stack, s.detail, domain.StateReady)
	apiCall(t, stack.URL, clienttest.AliceToken, "POST", "/v1/environments/"+s.detail+"/checkpoints?wait=20s",
		map[string]any{"name": "before-migration-0042-add-ledger-reconciliation-index"}, nil)
	c, err := client.New(stack.URL, clienttest.AliceToken)
	if err != nil {
		t.Fatal(err)
	}
	pauseIdle(t, stack, c, s.paused)

	// Twenty keys: the organization's and alice's, with scopes and expiries.
	for i := range 20 {
		body := map[string]any{"name": fmt.Sprintf("ci-runner-payments-integration-tests-eu-west-%d", i+1)}
		path := "/v1/keys"
		if i%2 == 1 {
			path = "/v1/tokens"
			body["name"] = fmt.Sprintf("alice-laptop-%02d-macbook-pro-16-inch-2026", i+1)
			body["source"] = "cli"
		}
		if i%3 == 0 {
			body["scopes"] = []string{"environments:lease", "environments:exec", "environments:read", "artifacts:read", "artifacts:write"}
		}
		if i%4 == 0 {
			body["expiresIn"] = "2160h"
		}
		apiCall(t, stack.URL, clienttest.AliceToken, "POST", path, body, nil)
	}

	data := []byte(strings.Repeat("payments coverage report\n", 400))
	if _, err := c.Push(context.Background(), bytes.NewReader(data), int64(len(data)), client.ArtifactCreate{
		Name: "coverage-report-payments-ledger-reconciliation-2026-11-28T14-00-00Z.html", ContentType: "text/html",
		Labels: map[string]string{"pr": "https://github.com/acme/payments/pull/4242", "commit": "9f2c4e7b1a0d8c6e5f4b3a2918d7c6b5a4f3e2d1"},
	}, client.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	apiCall(t, stack.URL, clienttest.AliceToken, "POST", "/v1/sandboxes", map[string]any{
		"name": "alice-workstation-in-the-berlin-office", "hostname": "alice-workstation-berlin-office.corp.acme.example"}, nil)
	return s
}

// waitState waits for an environment to reach a state, and for a failed
// one's log to be kept.
func waitState(t *testing.T, stack *clienttest.Stack, id string, state domain.State) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var e domain.Environment
		apiCall(t, stack.URL, clienttest.AliceToken, http.MethodGet, "/v1/environments/"+id, nil, &e)
		if e.State == state && (state != domain.StateFailed || e.Log != "") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s, not %s (log %q)", id, e.State, state, e.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
