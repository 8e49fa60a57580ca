package usage_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/timeouts"
	"github.com/envlease/envlease/shared/usage"
)

func putSettings(t testing.TB, e *apitest.Env, set map[string]any) usage.Settings {
	t.Helper()
	res := e.Do(http.MethodPut, "/v1/usage/settings", apitest.AliceToken, set)
	if res.Status != http.StatusOK {
		t.Fatalf("PUT /v1/usage/settings: %d %s", res.Status, res.Body)
	}
	var b struct {
		Settings usage.Settings `json:"settings"`
	}
	res.JSON(t, &b)
	return b.Settings
}

// totals sums a report by day, and in all.
func totals(r usage.Report) (map[string]int64, int64) {
	days := map[string]int64{}
	var all int64
	for _, u := range r.Usage {
		days[u.Day] += u.Seconds
		all += u.Seconds
	}
	return days, all
}

func q(params ...string) string {
	v := url.Values{}
	for i := 0; i < len(params); i += 2 {
		v.Set(params[i], params[i+1])
	}
	return "?" + v.Encode()
}

// Random leases, touches, deletes and timeout runs over several days on the
// fake clock: every grouping, and every split of the plain report by a
// filter, adds up to the plain report, day by day, stopped and live alike.
func TestGroupedTotalsEqualPlainTotal(t *testing.T) {
	e := newEnv(t)
	putSettings(t, e, map[string]any{"groupings": []string{"project", "user", "label:team"}})
	rng := rand.New(rand.NewPCG(25, 1))
	var live []string
	tokens := []string{apitest.AliceToken, apitest.BobToken}
	projects := []string{"", "web", "api"}
	teams := []string{"", "red", "blue"}
	since := apitest.Start.Format(usage.DayLayout)
	check := func(step int) {
		t.Helper()
		plain := report(t, e, apitest.AliceToken, q("since", since))
		wantDays, want := totals(plain)
		for _, by := range []string{"template", "project", "user", "label:team"} {
			r := report(t, e, apitest.BobToken, q("since", since, "by", by))
			days, all := totals(r)
			if all != want || fmt.Sprint(days) != fmt.Sprint(wantDays) || r.By != by {
				t.Fatalf("step %d: by %s: %d s %v, plain %d s %v", step, by, all, days, want, wantDays)
			}
		}
		// Filters split the plain report: by template, with each project.
		var sum int64
		for _, p := range projects {
			_, all := totals(report(t, e, apitest.BobToken, q("since", since, "filter", "project="+p)))
			sum += all
		}
		if sum != want {
			t.Fatalf("step %d: filtered by project %d s, plain %d s", step, sum, want)
		}
	}
	for step := range 80 {
		switch op := rng.IntN(10); {
		case op < 4:
			body := map[string]any{"template": []string{"shell", "sleeper"}[rng.IntN(2)], "project": projects[rng.IntN(3)]}
			if team := teams[rng.IntN(3)]; team != "" {
				body["labels"] = map[string]string{"team": team}
			}
			res := e.Do(http.MethodPost, "/v1/environments", tokens[rng.IntN(2)], body)
			switch {
			case res.Status == http.StatusCreated:
				var b struct {
					Environment struct{ ID string } `json:"environment"`
				}
				res.JSON(t, &b)
				live = append(live, b.Environment.ID)
			case res.Status != http.StatusTooManyRequests:
				t.Fatalf("lease: %d %s", res.Status, res.Body)
			}
		case op < 6 && len(live) > 0:
			i := rng.IntN(len(live))
			e.Do(http.MethodDelete, "/v1/environments/"+live[i], apitest.AliceToken, nil)
			live = append(live[:i], live[i+1:]...)
		case op < 8 && len(live) > 0:
			e.Do(http.MethodPost, "/v1/environments/"+live[rng.IntN(len(live))]+"/touch", apitest.AliceToken, nil)
		default:
			e.Clock.Advance(time.Duration(rng.IntN(3*3600)) * time.Second)
			if _, err := timeouts.Run(context.Background(), e.Store, e.Clock, timeouts.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		if step%10 == 9 {
			check(step)
		}
	}
	if _, all := totals(report(t, e, apitest.AliceToken, q("since", since))); all == 0 {
		t.Fatal("the random run used nothing")
	}
}

// A grouped answer names its grouping and values; a filter on the grouping
// keeps one value; by template filtered by a grouping reads that grouping.
func TestGroupedAnswer(t *testing.T) {
	e := newEnv(t)
	set := putSettings(t, e, map[string]any{"groupings": []string{"label:team"}})
	if set.Since["label:team"] != "2026-03-14" {
		t.Fatalf("since %v", set.Since)
	}
	for _, team := range []string{"red", "red", "blue"} {
		if res := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper", "labels": map[string]string{"team": team}}); res.Status != 201 {
			t.Fatal(res.Status, string(res.Body))
		}
	}
	e.Clock.Advance(10 * time.Minute)
	r := report(t, e, apitest.BobToken, "?by=label:team")
	if r.By != "label:team" || r.Until != "2026-03-14" || r.GroupedSince != "2026-03-14" || len(r.Usage) != 2 ||
		*r.Usage[0].Value != "blue" || r.Usage[0].Seconds != 600 || *r.Usage[1].Value != "red" || r.Usage[1].Seconds != 1200 {
		t.Fatalf("grouped %+v", r)
	}
	r = report(t, e, apitest.BobToken, "?by=label:team&filter=label:team=red")
	if len(r.Usage) != 1 || r.Usage[0].Seconds != 1200 || r.Filter != "label:team=red" {
		t.Fatalf("filtered %+v", r)
	}
	r = report(t, e, apitest.BobToken, "?filter=label:team=blue")
	if len(r.Usage) != 1 || r.Usage[0].Template != "sleeper" || r.Usage[0].Seconds != 600 {
		t.Fatalf("by template, filtered %+v", r)
	}
	for _, bad := range []string{"?by=project", "?by=label:Team", "?by=label:team&filter=user=bob", "?filter=team", "?since=2026-03-14&until=2026-03-13", "?until=2026-03-15", "?by="} {
		if res := e.Do(http.MethodGet, "/v1/usage"+bad, apitest.BobToken, nil); res.Status != 400 {
			t.Errorf("%s: %d %s", bad, res.Status, res.Body)
		}
	}
	// Only admins change the settings; invalid settings are 422.
	if res := e.Do(http.MethodPut, "/v1/usage/settings", apitest.BobToken, map[string]any{}); res.Status != 403 {
		t.Errorf("member PUT: %d", res.Status)
	}
	for _, bad := range []map[string]any{
		{"groupings": []string{"template"}},
		{"groupings": []string{"label:a", "label:b", "label:c", "label:d", "label:e", "label:f", "label:g", "label:h", "label:i"}},
		{"rates": map[string]any{"shell": []map[string]any{{"from": "2026-03-01", "perHour": 1}}}}, // no currency
		{"currency": "euro"},
		{"currency": "EUR", "rates": map[string]any{"shell": []map[string]any{{"from": "2026-03-01", "perHour": -1}}}},
	} {
		if res := e.Do(http.MethodPut, "/v1/usage/settings", apitest.AliceToken, bad); res.Status != 422 {
			t.Errorf("%v: %d %s", bad, res.Status, res.Body)
		}
	}
}
