package nodes_test

import (
	"context"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// What a node reports of an end becomes the environment's stopReason, in
// the one vocabulary, and the reason of its event.
func TestReportedEndsSayWhy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report map[string]any
		want   string
	}{
		{"exited on its own", map[string]any{"state": "failed", "error": "process exited with status 3", "reason": "exited"}, domain.StopExited},
		{"stopped on its own", map[string]any{"state": "stopped"}, domain.StopExited},
		{"killed at its memory limit", map[string]any{"state": "failed", "error": "killed: out of memory (the environment's memory limit) (exit 137)"}, domain.StopOutOfMemory},
		{"its disk filled", map[string]any{"state": "failed", "error": "ran out of disk (out_of_disk): its disk is full", "reason": "out_of_disk"}, domain.StopOutOfDisk},
		{"could not start", map[string]any{"state": "failed", "error": "image not found"}, domain.StopFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tok := e.credential(t, apitest.AliceToken, "local")
			node := e.register(t, tok, 4)
			id := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
			if c, r := e.claim(t, tok, node, "0s"); c == nil {
				t.Fatalf("claim: %d %s", r.Status, r.Body)
			}
			if r := e.report(tok, node, id, map[string]any{"state": "ready"}); r.Status != 200 {
				t.Fatalf("ready: %d %s", r.Status, r.Body)
			}
			if r := e.report(tok, node, id, tc.report); r.Status != 200 {
				t.Fatalf("report %v: %d %s", tc.report, r.Status, r.Body)
			}
			got := e.get(t, apitest.BobToken, id)
			if got.StopReason != tc.want {
				t.Fatalf("stopReason %q, want %q", got.StopReason, tc.want)
			}
			page, err := e.Store.ListEvents(context.Background(), "acme", domain.EventQuery{Type: "environment." + string(got.State), Limit: 10}, e.Clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, ev := range page.Events {
				if ev.Subject.ID == id {
					found = true
					if ev.Data["reason"] != tc.want {
						t.Fatalf("event %s reason %v, want %s", ev.Type, ev.Data["reason"], tc.want)
					}
				}
			}
			if !found {
				t.Fatalf("no environment.%s event", got.State)
			}
		})
	}
	// A word that is not a node's is refused.
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 4)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	if c, r := e.claim(t, tok, node, "0s"); c == nil {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	for _, bad := range []map[string]any{{"state": "failed", "error": "x", "reason": "deleted"}, {"state": "ready", "reason": "exited"}} {
		if r := e.report(tok, node, id, bad); r.Status != 422 {
			t.Errorf("report %v: %d %s", bad, r.Status, r.Body)
		}
	}
}
