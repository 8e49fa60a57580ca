package budgets_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/timeouts"
)

func newEnv(t testing.TB) *apitest.Env {
	t.Helper()
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, &blob.Store{}) })
}

func must(t testing.TB, e *apitest.Env, method, path, token string, body any, status int) *apitest.Response {
	t.Helper()
	res := e.Do(method, path, token, body)
	if res.Status != status {
		t.Fatalf("%s %s: %d %s, want %d", method, path, res.Status, res.Body, status)
	}
	return res
}

func leaseIn(t testing.TB, e *apitest.Env, project string) *apitest.Response {
	t.Helper()
	return e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper", "project": project})
}

func run(t testing.TB, e *apitest.Env) budgets.Summary {
	t.Helper()
	sum, err := budgets.Run(context.Background(), e.Store, e.Clock.Now())
	if err != nil {
		t.Fatalf("budget run: %v", err)
	}
	return sum
}

func eventTypes(t testing.TB, e *apitest.Env) []string {
	t.Helper()
	var page domain.EventPage
	must(t, e, http.MethodGet, "/v1/events?type=budget.", apitest.AliceToken, nil, 200).JSON(t, &page)
	var out []string
	for _, ev := range page.Events {
		out = append(out, ev.Type+":"+ev.Subject.ID)
	}
	return out
}

// A spent budget refuses leases in its scope with 429 `budget` naming it,
// and only in its scope; its 80 % and 100 % events are raised once; a new
// period, or a raised limit, lets leases through at once.
func TestSpentBudgetRefusesLeasesInItsScope(t *testing.T) {
	e := newEnv(t)
	must(t, e, http.MethodPut, "/v1/usage/settings", apitest.AliceToken, map[string]any{"groupings": []string{"project"}}, 200)
	must(t, e, http.MethodPut, "/v1/budgets/web-daily", apitest.AliceToken,
		map[string]any{"scope": "project=web", "period": "day", "seconds": 1000}, 200)
	if r := leaseIn(t, e, "web"); r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(810 * time.Second) // 81 %
	if s := run(t, e); s.Alerts != 1 || s.Spent != 0 {
		t.Fatalf("at 81 %%: %+v", s)
	}
	if s := run(t, e); s.Alerts != 0 {
		t.Fatalf("again at 81 %%: %+v", s)
	}
	e.Clock.Advance(200 * time.Second) // 101 %
	if s := run(t, e); s.Alerts != 1 || s.Spent != 1 {
		t.Fatalf("at 101 %%: %+v", s)
	}
	if got := strings.Join(eventTypes(t, e), " "); got != "budget.spent:web-daily budget.warning:web-daily" {
		t.Fatalf("events %s", got)
	}
	r := leaseIn(t, e, "web")
	if r.Status != 429 || r.Code() != "budget" || !strings.Contains(string(r.Body), `\"web-daily\"`) {
		t.Fatalf("lease in a spent budget: %d %s", r.Status, r.Body)
	}
	if r := leaseIn(t, e, "api"); r.Status != 201 {
		t.Fatalf("lease out of its scope: %d %s", r.Status, r.Body)
	}
	var list budgets.List
	must(t, e, http.MethodGet, "/v1/budgets", apitest.BobToken, nil, 200).JSON(t, &list)
	if len(list.Budgets) != 1 || !list.Budgets[0].Exhausted || list.Budgets[0].Spent != 1010 || list.Budgets[0].Remaining != 0 || list.Budgets[0].Unit != "seconds" {
		t.Fatalf("list %+v", list)
	}
	// Raising the limit lets leases through before any run.
	must(t, e, http.MethodPut, "/v1/budgets/web-daily", apitest.AliceToken,
		map[string]any{"scope": "project=web", "period": "day", "seconds": 5000}, 200)
	if r := leaseIn(t, e, "web"); r.Status != 201 {
		t.Fatalf("after raising: %d %s", r.Status, r.Body)
	}
	// Spent again; tomorrow is another period, before any run.
	must(t, e, http.MethodPut, "/v1/budgets/web-daily", apitest.AliceToken,
		map[string]any{"scope": "project=web", "period": "day", "seconds": 1000}, 200)
	if r := leaseIn(t, e, "web"); r.Status != 429 || r.Code() != "budget" {
		t.Fatalf("lowered: %d %s", r.Status, r.Body)
	}
	e.Clock.Set(time.Date(2026, 3, 15, 0, 0, 1, 0, time.UTC))
	if _, err := timeouts.Run(context.Background(), e.Store, e.Clock, timeouts.Options{}); err != nil {
		t.Fatal(err)
	}
	if r := leaseIn(t, e, "web"); r.Status != 201 {
		t.Fatalf("next day: %d %s", r.Status, r.Body)
	}
	// Deleting it: gone from the list; a second delete is 404.
	must(t, e, http.MethodDelete, "/v1/budgets/web-daily", apitest.AliceToken, nil, 204)
	must(t, e, http.MethodDelete, "/v1/budgets/web-daily", apitest.AliceToken, nil, 404)
	// With no budgets left, the run drops the organization from its list.
	if orgs, err := e.Store.BudgetOrgs(context.Background()); err != nil || len(orgs) != 1 {
		t.Fatalf("registered %v %v", orgs, err)
	}
	if s := run(t, e); s.Orgs != 0 {
		t.Fatalf("run without budgets: %+v", s)
	}
	if orgs, err := e.Store.BudgetOrgs(context.Background()); err != nil || len(orgs) != 0 {
		t.Fatalf("still registered %v %v", orgs, err)
	}
}

// A hard budget stops the live environments of its scope at the next run,
// with reason budget; a soft one only refuses leases.
func TestHardBudgetStopsItsEnvironments(t *testing.T) {
	e := newEnv(t)
	must(t, e, http.MethodPut, "/v1/usage/settings", apitest.AliceToken, map[string]any{
		"groupings": []string{"label:team"}, "currency": "EUR",
		"rates": map[string]any{"sleeper": []map[string]any{{"from": "2026-03-01", "perHour": 6}}},
	}, 200)
	must(t, e, http.MethodPut, "/v1/budgets/red", apitest.AliceToken,
		map[string]any{"scope": "label:team=red", "period": "month", "cost": 1, "hard": true}, 200)
	must(t, e, http.MethodPut, "/v1/budgets/all", apitest.AliceToken,
		map[string]any{"scope": "org", "period": "month", "seconds": 100}, 200)
	var ids []string
	for _, team := range []string{"red", "blue"} {
		var b struct {
			Environment struct{ ID string } `json:"environment"`
		}
		must(t, e, http.MethodPost, "/v1/environments", apitest.BobToken,
			map[string]any{"template": "sleeper", "labels": map[string]string{"team": team}}, 201).JSON(t, &b)
		ids = append(ids, b.Environment.ID)
	}
	e.Clock.Advance(6 * time.Minute) // red: 0.6 EUR; all: 720 s, spent but soft
	if s := run(t, e); s.Stopped != 0 || s.Spent != 1 {
		t.Fatalf("before red is spent: %+v", s)
	}
	e.Clock.Advance(5 * time.Minute) // red: 1.1 EUR
	if s := run(t, e); s.Stopped != 1 || s.Spent != 2 {
		t.Fatalf("red spent: %+v", s)
	}
	var red, blue domain.Environment
	must(t, e, http.MethodGet, "/v1/environments/"+ids[0], apitest.BobToken, nil, 200).JSON(t, &red)
	must(t, e, http.MethodGet, "/v1/environments/"+ids[1], apitest.BobToken, nil, 200).JSON(t, &blue)
	if red.State.Live() || red.StopReason != "budget" || !blue.State.Live() {
		t.Fatalf("red %s %s, blue %s", red.State, red.StopReason, blue.State)
	}
	var list budgets.List
	must(t, e, http.MethodGet, "/v1/budgets", apitest.AliceToken, nil, 200).JSON(t, &list)
	if list.Currency != "EUR" || list.Budgets[1].ID != "red" || list.Budgets[1].Unit != "EUR" || list.Budgets[1].Spent != 1.1 {
		t.Fatalf("list %+v", list)
	}
}

// Budgets need the grouping of their scope, and rates for a cost; only
// admins set them.
func TestBudgetRefusals(t *testing.T) {
	e := newEnv(t)
	for _, bad := range []map[string]any{
		{"scope": "project=web", "period": "day", "seconds": 10}, // project not grouped
		{"scope": "org", "period": "week", "seconds": 10},
		{"scope": "org", "period": "day"},
		{"scope": "org", "period": "day", "seconds": 10, "cost": 1},
		{"scope": "org", "period": "day", "cost": 1}, // no rates
		{"scope": "team=red", "period": "day", "seconds": 10},
	} {
		if r := e.Do(http.MethodPut, "/v1/budgets/b1", apitest.AliceToken, bad); r.Status != 422 {
			t.Errorf("%v: %d %s", bad, r.Status, r.Body)
		}
	}
	if r := e.Do(http.MethodPut, "/v1/budgets/Bad%20Id", apitest.AliceToken, map[string]any{"scope": "org", "period": "day", "seconds": 10}); r.Status != 422 {
		t.Errorf("bad id: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodPut, "/v1/budgets/b1", apitest.BobToken, map[string]any{"scope": "org", "period": "day", "seconds": 10}); r.Status != 403 {
		t.Errorf("member: %d", r.Status)
	}
}

// With a budget in place (not spent), 50 concurrent leases against a quota
// of 3 still lease exactly 3: the budget check is one more condition of the
// same transaction.
func TestQuotaStaysExactWithBudgets(t *testing.T) {
	e := newEnv(t)
	must(t, e, http.MethodPut, "/v1/budgets/all", apitest.AliceToken,
		map[string]any{"scope": "org", "period": "month", "seconds": 1000000}, 200)
	var mu sync.Mutex
	var wg sync.WaitGroup
	created, quota := 0, 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, `{"template":"sleeper"}`)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Status == 201:
				created++
			case r.Status == 429 && r.Code() == "quota":
				quota++
			default:
				t.Errorf("unexpected %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	if created != 3 || quota != 47 {
		t.Fatalf("50 concurrent leases: %d created, %d refused; want 3 and 47", created, quota)
	}
}

// A grouping a budget counts by cannot be turned off: the budget would stop
// counting, and a spent one stop blocking, without a word.
func TestGroupingOfABudgetStaysOn(t *testing.T) {
	e := newEnv(t)
	must(t, e, http.MethodPut, "/v1/usage/settings", apitest.AliceToken, map[string]any{"groupings": []string{"project", "label:team"}}, 200)
	must(t, e, http.MethodPut, "/v1/budgets/web-daily", apitest.AliceToken,
		map[string]any{"scope": "project=web", "period": "day", "seconds": 60}, 200)
	if r := must(t, e, http.MethodPut, "/v1/usage/settings", apitest.AliceToken, map[string]any{"groupings": []string{"label:team"}}, 409); !strings.Contains(string(r.Body), "web-daily") {
		t.Fatalf("refusal does not name the budget: %s", r.Body)
	}
	// Another grouping may go; once the budget is gone, so may its own.
	must(t, e, http.MethodPut, "/v1/usage/settings", apitest.AliceToken, map[string]any{"groupings": []string{"project"}}, 200)
	must(t, e, http.MethodDelete, "/v1/budgets/web-daily", apitest.AliceToken, nil, 204)
	must(t, e, http.MethodPut, "/v1/usage/settings", apitest.AliceToken, map[string]any{"groupings": []string{}}, 200)
}
