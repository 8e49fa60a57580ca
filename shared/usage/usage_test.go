package usage_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/timeouts"
	"github.com/envlease/envlease/shared/usage"
)

func TestSplit(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		from, to string
		want     []usage.DaySeconds
	}{
		{"2026-03-14T23:30:00Z", "2026-03-15T00:45:00Z", []usage.DaySeconds{{"2026-03-14", 1800}, {"2026-03-15", 2700}}},
		{"2026-03-14T10:00:00Z", "2026-03-14T10:00:30Z", []usage.DaySeconds{{"2026-03-14", 30}}},
		// Whole days in between; ends exactly at midnight add no empty day.
		{"2026-03-14T12:00:00Z", "2026-03-17T00:00:00Z", []usage.DaySeconds{{"2026-03-14", 43200}, {"2026-03-15", 86400}, {"2026-03-16", 86400}}},
		// Other zones are read as the UTC instant they are.
		{"2026-03-15T01:30:00+02:00", "2026-03-15T02:30:00+02:00", []usage.DaySeconds{{"2026-03-14", 1800}, {"2026-03-15", 1800}}},
		// Fractions are truncated at both ends, so the parts add up.
		{"2026-03-14T23:59:59.9Z", "2026-03-15T00:00:00.7Z", []usage.DaySeconds{{"2026-03-14", 1}}},
		{"2026-03-14T10:00:00Z", "2026-03-14T10:00:00Z", nil},
		{"2026-03-14T10:00:00Z", "2026-03-14T09:00:00Z", nil},
	}
	for _, c := range cases {
		if got := usage.Split(at(c.from), at(c.to)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%s, %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	ok := map[string]string{
		"":           "2026-02-12T00:00:00Z", // 30 days back
		"2026-03-14": "2026-03-14T00:00:00Z", // today
		"2025-02-07": "2025-02-07T00:00:00Z", // 400 days back
	}
	for in, want := range ok {
		got, err := usage.ParseSince(in, now)
		if err != nil || got.Format(time.RFC3339) != want {
			t.Errorf("ParseSince(%q) = %s, %v; want %s", in, got.Format(time.RFC3339), err, want)
		}
	}
	for _, in := range []string{"2026-03-15", "2025-02-06", "yesterday", "2026-3-1", "2026-02-30", "2026-03-14T00:00:00Z", " 2026-03-01"} {
		if _, err := usage.ParseSince(in, now); err == nil {
			t.Errorf("ParseSince(%q) accepted", in)
		}
	}
}

func newEnv(t testing.TB) *apitest.Env {
	t.Helper()
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		return [][]httpapi.Route{
			environments.Routes(environments.NewService(e.Store, e.Clock)),
			usage.Routes(usage.NewService(e.Store, e.Clock)),
		}
	})
}

func lease(t testing.TB, e *apitest.Env, token, template string) string {
	t.Helper()
	res := e.Do(http.MethodPost, "/v1/environments", token, map[string]any{"template": template})
	if res.Status != http.StatusCreated {
		t.Fatalf("lease: %d %s", res.Status, res.Body)
	}
	var b struct {
		Environment struct {
			ID string `json:"id"`
		} `json:"environment"`
	}
	res.JSON(t, &b)
	return b.Environment.ID
}

func report(t testing.TB, e *apitest.Env, token, query string) usage.Report {
	t.Helper()
	res := e.Do(http.MethodGet, "/v1/usage"+query, token, nil)
	if res.Status != http.StatusOK {
		t.Fatalf("GET /v1/usage%s: %d %s", query, res.Status, res.Body)
	}
	var r usage.Report
	res.JSON(t, &r)
	return r
}

// Stopped environments come from the ledger, live ones count up to now,
// both split at midnight; the answer is sorted by day, then template.
func TestUsageReportsStoppedAndLiveEnvironments(t *testing.T) {
	e := newEnv(t)
	e.Clock.Set(time.Date(2026, 3, 14, 23, 0, 0, 0, time.UTC))
	stoppedID := lease(t, e, apitest.BobToken, "sleeper") // stopped by DELETE at 23:20
	e.Clock.Advance(20 * time.Minute)
	if res := e.Do(http.MethodDelete, "/v1/environments/"+stoppedID, apitest.BobToken, nil); res.Status != http.StatusOK {
		t.Fatal(res.Status)
	}
	e.Clock.Set(time.Date(2026, 3, 14, 23, 45, 0, 0, time.UTC))
	lease(t, e, apitest.BobToken, "shell") // live: 23:45 -> now
	e.Clock.Set(time.Date(2026, 3, 15, 0, 10, 0, 0, time.UTC))

	r := report(t, e, apitest.AliceToken, "?since=2026-03-14")
	want := []usage.Entry{
		{Template: "shell", Day: "2026-03-14", Seconds: 900},
		{Template: "sleeper", Day: "2026-03-14", Seconds: 1200},
		{Template: "shell", Day: "2026-03-15", Seconds: 600},
	}
	if !r.Since.Equal(time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC)) || !reflect.DeepEqual(r.Usage, want) {
		t.Fatalf("report %+v, want since 2026-03-14T00:00:00Z and %+v", r, want)
	}
	// since cuts by day, also through a live environment.
	r = report(t, e, apitest.AliceToken, "?since=2026-03-15")
	if !reflect.DeepEqual(r.Usage, want[2:]) {
		t.Fatalf("since today: %+v", r.Usage)
	}
	// Default: the last 30 days.
	r = report(t, e, apitest.BobToken, "")
	if !r.Since.Equal(time.Date(2026, 2, 13, 0, 0, 0, 0, time.UTC)) || !reflect.DeepEqual(r.Usage, want) {
		t.Fatalf("default report %+v", r)
	}
	// The timeout job's stops land in the same ledger: the shell goes idle
	// at 00:15 and is stopped by a sweep at 00:20, which is what it counts.
	e.Clock.Set(time.Date(2026, 3, 15, 0, 20, 0, 0, time.UTC))
	if s, err := timeouts.Run(context.Background(), e.Store, e.Clock, timeouts.Options{}); err != nil || s.Idle != 1 {
		t.Fatalf("sweep %+v %v", s, err)
	}
	e.Clock.Advance(time.Hour)
	r = report(t, e, apitest.AliceToken, "?since=2026-03-14")
	want[2].Seconds = 1200
	if !reflect.DeepEqual(r.Usage, want) {
		t.Fatalf("after the sweep: %+v", r.Usage)
	}
}

// Organizations never see each other's usage, stopped or live.
func TestUsageIsPerOrganization(t *testing.T) {
	e := newEnv(t)
	acme := lease(t, e, apitest.BobToken, "shell")
	lease(t, e, apitest.CarolToken, "shell") // globex, stays live
	e.Clock.Advance(10 * time.Minute)
	if res := e.Do(http.MethodDelete, "/v1/environments/"+acme, apitest.BobToken, nil); res.Status != http.StatusOK {
		t.Fatal(res.Status)
	}
	e.Clock.Advance(5 * time.Minute)
	lease(t, e, apitest.BobToken, "sleeper") // acme, live for 5 minutes at the report
	e.Clock.Advance(5 * time.Minute)

	day := apitest.Start.Format(usage.DayLayout)
	if r := report(t, e, apitest.AliceToken, ""); !reflect.DeepEqual(r.Usage, []usage.Entry{
		{Template: "shell", Day: day, Seconds: 600}, {Template: "sleeper", Day: day, Seconds: 300},
	}) {
		t.Fatalf("acme sees %+v", r.Usage)
	}
	if r := report(t, e, apitest.CarolToken, ""); !reflect.DeepEqual(r.Usage, []usage.Entry{
		{Template: "shell", Day: day, Seconds: 1200},
	}) {
		t.Fatalf("globex sees %+v", r.Usage)
	}
}

func TestUsageRefusals(t *testing.T) {
	e := newEnv(t) // today is 2026-03-14
	for _, q := range []string{
		"?since=2026-03-15",           // the future
		"?since=2025-02-06",           // more than 400 days back
		"?since=14.03.2026",           // not a date
		"?since=2026-03-14T00:00:00Z", // a timestamp, not a day
		"?since=",                     // empty
		"?since=2026-03-01&since=2026-03-02",
		"?from=2026-03-01", // unknown parameter
	} {
		res := e.Do(http.MethodGet, "/v1/usage"+q, apitest.BobToken, nil)
		if res.Status != http.StatusBadRequest || res.Code() != "bad_request" {
			t.Errorf("%s: %d %s", q, res.Status, res.Body)
		}
	}
	if res := e.Do(http.MethodGet, "/v1/usage", "", nil); res.Status != http.StatusUnauthorized {
		t.Errorf("no token: %d", res.Status)
	}
	if r := report(t, e, apitest.BobToken, "?since=2025-02-07"); len(r.Usage) != 0 || r.Usage == nil {
		t.Errorf("400 days back, nothing used: %+v", r)
	}
}

// Every way out of the live states writes the ledger, once: here a node's
// failure report (through StopEnvironment, as the node side calls it), then
// the same stop retried from the record it started from, which changes nothing.
func TestLedgerIsWrittenOnceForAnyStop(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := lease(t, e, apitest.BobToken, "shell")
	env, err := e.Store.GetEnvironment(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(7 * time.Minute)
	for i := range 3 {
		_, stopped, err := e.Store.StopEnvironment(ctx, env, domain.StateFailed, "node lost", e.Clock.Now())
		if err != nil || stopped != (i == 0) {
			t.Fatalf("stop %d: stopped %v, %v", i, stopped, err)
		}
	}
	got, err := e.Store.ListUsage(ctx, "acme", "2026-03-14", "2026-03-14")
	if err != nil || !reflect.DeepEqual(got, []usage.Entry{{Template: "shell", Day: "2026-03-14", Seconds: 420}}) {
		t.Fatalf("ledger %+v %v", got, err)
	}
}
