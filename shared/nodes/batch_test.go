package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// roomFor raises the quota of acme's sleeper to n live environments.
func (se *socketEnv) roomFor(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	tpl, err := se.Store.GetTemplate(ctx, "acme", "sleeper")
	if err != nil {
		t.Fatal(err)
	}
	tpl.Quota.MaxLeases = n
	if err := se.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
}

func (se *socketEnv) leaseMany(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = se.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	}
	return ids
}

// A batch claim of n offered environments costs one transaction for all of
// them and a fixed four calls beside it, whatever n is: the node (with its
// credential), what it runs, one batch read of the offered ones, and their
// template once. The lease's own calls are pinned the same way
// (TestLeaseIsAuthReadPlusOneTransaction).
func TestBatchClaimCalls(t *testing.T) {
	for _, n := range []int{1, 4, 16, nodes.MaxClaimBatch} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			se := newSocketEnv(t)
			se.roomFor(t, 100)
			tok := se.credential(t, apitest.AliceToken, "local")
			node := se.hello(t, "c1", tok, 100)
			ids := se.leaseMany(t, n)
			se.calls.Reset()
			r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "b", Node: node, Environments: ids, Max: n})
			if r.Type != nodes.MsgClaimed || len(r.Claims) != n {
				t.Fatalf("batch claim of %d: %d claimed (%+v)", n, len(r.Claims), r.Error)
			}
			got := map[string]bool{}
			for _, c := range r.Claims {
				if c.Environment.State != domain.StateStarting || c.Environment.Node != node || c.Template.Name != "sleeper" || got[c.Environment.ID] {
					t.Fatalf("claimed %+v", c.Environment)
				}
				got[c.Environment.ID] = true
			}
			// The node with its credential (one BatchGetItem), what it runs
			// (Query), the offered ones (BatchGetItem), the template (GetItem).
			want := map[string]int{"BatchGetItem": 2, "GetItem": 1, "Query": 1, "TransactWriteItems": 1}
			if counts := se.calls.Counts(); fmt.Sprint(counts) != fmt.Sprint(want) {
				t.Fatalf("calls for a batch of %d: %v, want %v", n, counts, want)
			}
		})
	}
}

// A batch claim takes what the offered ones leave to pending ones, and
// never more than the node's free capacity.
func TestBatchClaimFillsToCapacity(t *testing.T) {
	se := newSocketEnv(t)
	se.roomFor(t, 100)
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 6)
	ids := se.leaseMany(t, 10)
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "1", Node: node, Environments: ids[:2], Max: 2})
	if len(r.Claims) != 2 {
		t.Fatalf("first batch: %+v", r)
	}
	// Four of six left: one offered, the rest from what is pending.
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "2", Node: node, Environments: ids[9:], Max: 20})
	if len(r.Claims) != 4 || r.Claims[0].Environment.ID != ids[9] {
		t.Fatalf("second batch: %d claimed, want 4 with %s first", len(r.Claims), ids[9])
	}
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "3", Node: node, Max: 20})
	if r.Type != nodes.MsgError || r.Error.Status != 409 {
		t.Fatalf("a claim at capacity: %+v", r)
	}
	pending := 0
	for _, id := range ids {
		if se.get(t, apitest.BobToken, id).State == domain.StatePending {
			pending++
		}
	}
	if pending != 4 {
		t.Fatalf("%d pending after claiming 6 of 10", pending)
	}
}

// Nodes claiming the same crowd in batches at once never claim an
// environment twice, and each stays within its capacity.
func TestBatchClaimIsExact(t *testing.T) {
	se := newSocketEnv(t)
	se.roomFor(t, 100)
	tok := se.credential(t, apitest.AliceToken, "local")
	const nodeCount, capacity, envs = 4, 5, 14
	conns := make([]nodes.ConnectionID, nodeCount)
	ids := make([]string, nodeCount)
	for i := range ids {
		conns[i] = nodes.ConnectionID(fmt.Sprintf("c%d", i))
		ids[i] = se.hello(t, conns[i], tok, capacity)
	}
	leased := se.leaseMany(t, envs)
	var wg sync.WaitGroup
	got := make([]nodes.Message, nodeCount)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = se.send(t, conns[i], tok, nodes.Message{Type: nodes.MsgClaim, ID: "x", Node: ids[i], Environments: leased, Max: nodes.MaxClaimBatch})
		}()
	}
	wg.Wait()
	owner := map[string]string{}
	for i, r := range got {
		if r.Type != nodes.MsgClaimed || len(r.Claims) > capacity {
			t.Fatalf("node %d: %+v (%d claims, capacity %d)", i, r.Error, len(r.Claims), capacity)
		}
		for _, c := range r.Claims {
			if prev, twice := owner[c.Environment.ID]; twice {
				t.Fatalf("%s claimed by %s and %s", c.Environment.ID, prev, ids[i])
			}
			owner[c.Environment.ID] = ids[i]
		}
	}
	if len(owner) != envs {
		t.Fatalf("%d of %d environments claimed (capacity %d)", len(owner), envs, nodeCount*capacity)
	}
	for id, n := range owner {
		if e := se.get(t, apitest.BobToken, id); e.Node != n || e.State != domain.StateStarting {
			t.Fatalf("%s: %s on %s, claimed by %s", id, e.State, e.Node, n)
		}
	}
}

// A batch's answer stays within what API Gateway posts in one message:
// with templates so large that only some claims fit, the batch claims
// those and leaves the rest pending for the next claim.
func TestBatchClaimAnswerFitsOneMessage(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tpl, err := se.Store.GetTemplate(ctx, "acme", "sleeper")
	if err != nil {
		t.Fatal(err)
	}
	tpl.Quota.MaxLeases = 100
	tpl.Env = map[string]string{}
	for i := range 20 {
		tpl.Env[fmt.Sprintf("LARGE_%d", i)] = strings.Repeat("x", 1000)
	}
	if err := se.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 100)
	ids := se.leaseMany(t, 10)
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "1", Node: node, Environments: ids, Max: len(ids)})
	raw, _ := json.Marshal(r)
	if len(r.Claims) == 0 || len(r.Claims) == len(ids) || len(raw) > 96<<10 {
		t.Fatalf("%d of %d claimed in an answer of %d bytes", len(r.Claims), len(ids), len(raw))
	}
	pending := 0
	for _, id := range ids {
		if se.get(t, apitest.BobToken, id).State == domain.StatePending {
			pending++
		}
	}
	if pending != len(ids)-len(r.Claims) {
		t.Fatalf("%d pending after %d of %d were claimed", pending, len(r.Claims), len(ids))
	}
}
