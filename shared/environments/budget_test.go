package environments_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/usage"
)

// The budget check is a condition of the lease's one transaction: with
// budgets and groupings in place a lease still costs the authentication read
// plus one transaction, and a lease refused by a spent budget costs the same.
func TestLeaseWithBudgetsIsAuthReadPlusOneTransaction(t *testing.T) {
	e, counter := newCountedEnv(t)
	ctx := context.Background()
	if err := e.Store.PutUsageSettings(ctx, "acme", usage.Settings{Groupings: []string{"project", "user", "label:team"}}, 0); err != nil {
		t.Fatal(err)
	}
	st := usage.BudgetState{Budgets: []usage.Budget{{ID: "all", Scope: "org", Period: "month", Seconds: 1 << 40}}}
	if err := e.Store.PutBudgets(ctx, "acme", st); err != nil {
		t.Fatal(err)
	}
	e.Do("GET", "/v1/quotas", apitest.AliceToken, nil)                        // the first use of a token records lastUsed
	lease(t, e, apitest.AliceToken, `{"template":"sleeper","project":"web"}`) // reads the template and the settings once
	counter.Reset()
	lease(t, e, apitest.AliceToken, `{"template":"sleeper","project":"web","labels":{"team":"red"}}`)
	if got := counter.Counts(); counter.Total() != 2 || got["BatchGetItem"] != 1 || got["TransactWriteItems"] != 1 {
		t.Fatalf("a lease with budgets cost %v", got)
	}
	// Spend the budget of project web (as the budget run would mark it).
	cur, err := e.Store.GetBudgets(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	cur.Budgets = append(cur.Budgets, usage.Budget{ID: "web", Scope: "project=web", Period: "day", Seconds: 1})
	cur.Blocked[usage.BlockKey("project=web", usage.PeriodOf(usage.PeriodDay, e.Clock.Now()))] = "web"
	if err := e.Store.PutBudgets(ctx, "acme", cur); err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, `{"template":"sleeper","project":"web"}`)
	if r.Status != 429 || r.Code() != "budget" {
		t.Fatalf("lease in a spent budget: %d %s", r.Status, r.Body)
	}
	if got := counter.Counts(); counter.Total() != 2 || got["TransactWriteItems"] != 1 {
		t.Fatalf("a refused lease cost %v", got)
	}
}
