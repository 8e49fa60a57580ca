package events_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/store"
)

var _ events.Store = (*store.Store)(nil)

func newEnv(t *testing.T) *apitest.Env {
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		ks := keys.NewService(e.Store, e.Clock)
		return [][]httpapi.Route{
			keys.TokenRoutes(ks), keys.KeyRoutes(ks),
			environments.Routes(environments.NewService(e.Store, e.Clock)),
			events.Routes(events.NewService(e.Store, e.Clock)),
		}
	})
}

func list(t *testing.T, e *apitest.Env, token, query string) domain.EventPage {
	t.Helper()
	res := e.Do("GET", "/v1/events?"+query, token, nil)
	if res.Status != 200 {
		t.Fatalf("GET /v1/events?%s: %d %s", query, res.Status, res.Body)
	}
	var p domain.EventPage
	res.JSON(t, &p)
	return p
}

// all follows `next` to the end.
func all(t *testing.T, e *apitest.Env, token, query string) []domain.Event {
	t.Helper()
	var out []domain.Event
	q, _ := url.ParseQuery(query)
	for {
		p := list(t, e, token, q.Encode())
		out = append(out, p.Events...)
		if p.Next == "" {
			return out
		}
		q.Set("cursor", p.Next)
	}
}

func types(evs []domain.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func TestEventsOfALease(t *testing.T) {
	e := newEnv(t)
	e.Clock.Advance(time.Minute)
	lease := func() string {
		res := e.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper", "name": "dev"})
		if res.Status != 201 {
			t.Fatalf("lease: %d %s", res.Status, res.Body)
		}
		return res.Map(t)["environment"].(map[string]any)["id"].(string)
	}
	id := lease()
	e.Clock.Advance(time.Second)
	if res := e.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); res.Status != 200 {
		t.Fatalf("delete: %d %s", res.Status, res.Body)
	}
	e.Clock.Advance(time.Second)
	// sleeper allows 3 live leases: the fourth is refused, with its event.
	for range 3 {
		lease()
	}
	if res := e.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper"}); res.Status != 429 {
		t.Fatalf("fourth lease: %d", res.Status)
	}

	subj := list(t, e, apitest.BobToken, "subject=environment/"+id)
	if got := types(subj.Events); fmt.Sprint(got) != "[environment.stopped environment.leased]" {
		t.Fatalf("events of %s: %v", id, got)
	}
	stopped := subj.Events[0]
	if stopped.Data["reason"] != domain.StopDeleted || stopped.Data["template"] != "sleeper" || stopped.Actor != (domain.Actor{Kind: "user", ID: "bob"}) ||
		stopped.Subject != (domain.Subject{Kind: "environment", ID: id}) || stopped.OrgID != "acme" || !stopped.Time.Equal(apitest.Start.Add(time.Minute+time.Second)) {
		t.Fatalf("stopped event: %+v", stopped)
	}
	refused := list(t, e, apitest.BobToken, "type=quota.refused").Events
	if len(refused) != 1 || refused[0].Data["limit"] != float64(3) || refused[0].Data["template"] != "sleeper" || refused[0].Subject.ID != "sleeper" {
		t.Fatalf("quota.refused: %+v", refused)
	}
	envs := all(t, e, apitest.BobToken, "type=environment.&limit=2")
	if len(envs) != 5 {
		t.Fatalf("environment events: %v", types(envs))
	}
	for i := 1; i < len(envs); i++ {
		if envs[i-1].ID <= envs[i].ID || envs[i-1].Time.Before(envs[i].Time) {
			t.Fatalf("not newest first: %v then %v", envs[i-1], envs[i])
		}
	}
	if got := all(t, e, apitest.BobToken, "type=environment.leased&limit=1"); len(got) != 4 {
		t.Fatalf("environment.leased: %v", types(got))
	}
	// The plain listing pages through everything once, fixture keys included.
	everything := all(t, e, apitest.BobToken, "limit=3")
	seen := map[string]bool{}
	for _, ev := range everything {
		if seen[ev.ID] {
			t.Fatalf("event %s listed twice", ev.ID)
		}
		seen[ev.ID] = true
	}
	if len(everything) != 6+len(list(t, e, apitest.BobToken, "type=key.").Events) {
		t.Fatalf("all events: %v", types(everything))
	}
	since := apitest.Start.Add(time.Minute + 2*time.Second).Format(time.RFC3339)
	if got := all(t, e, apitest.BobToken, "since="+since); len(got) != 4 {
		t.Fatalf("since %s: %v", since, types(got))
	}
	// Another organization sees none of it.
	if got := all(t, e, apitest.CarolToken, "type=environment."); len(got) != 0 {
		t.Fatalf("globex sees %v", types(got))
	}
	// Events are kept EventRetention: later, they are not listed.
	e.Clock.Advance(domain.EventRetention + time.Hour)
	if got := all(t, e, apitest.BobToken, ""); len(got) != 0 {
		t.Fatalf("after the retention: %v", types(got))
	}
}

func TestEventsQueryRefusals(t *testing.T) {
	e := newEnv(t)
	other := list(t, e, apitest.BobToken, "limit=1").Next
	if other == "" {
		t.Fatal("no second page")
	}
	for _, q := range []string{
		"type=environment", "type=environment.bogus", "type=bogus.", "type=.",
		"subject=environment", "subject=thing/x", "subject=environment/", "since=yesterday",
		"limit=0", "limit=201", "cursor=abc", "cursor=" + other + "&type=key.", "unknown=1",
	} {
		if res := e.Do("GET", "/v1/events?"+q, apitest.BobToken, nil); res.Status != 400 || res.Code() != "bad_request" {
			t.Errorf("%s: %d %s", q, res.Status, res.Body)
		}
	}
	if res := e.Do("GET", "/v1/events?cursor="+other, apitest.CarolToken, nil); res.Status != 400 {
		t.Errorf("another organization's cursor: %d", res.Status)
	}
}

// Members see of the key events only those of their own tokens, as
// GET /v1/keys shows them only their own; admins see every one.
func TestMembersSeeOnlyTheirOwnKeyEvents(t *testing.T) {
	e := newEnv(t)
	mk := func(token, path, name string) string {
		t.Helper()
		r := e.Do("POST", path, token, map[string]any{"name": name})
		if r.Status != 201 {
			t.Fatalf("POST %s: %d %s", path, r.Status, r.Body)
		}
		var out struct {
			APIKey domain.APIKey `json:"apiKey"`
		}
		r.JSON(t, &out)
		return out.APIKey.ID
	}
	bobs := mk(apitest.BobToken, "/v1/tokens", "bob's laptop")
	alices := mk(apitest.AliceToken, "/v1/tokens", "alice's laptop")
	orgKey := mk(apitest.AliceToken, "/v1/keys", "ci")
	seen := func(token string) map[string]bool {
		out := map[string]bool{}
		for _, ev := range all(t, e, token, "type=key.") {
			out[ev.Subject.ID] = true
		}
		return out
	}
	if got := seen(apitest.BobToken); !got[bobs] || got[alices] || got[orgKey] {
		t.Fatalf("bob sees key events of %v; want his own %s only", got, bobs)
	}
	if got := seen(apitest.AliceToken); !got[bobs] || !got[alices] || !got[orgKey] {
		t.Fatalf("alice (admin) sees key events of %v; want all three", got)
	}
}
