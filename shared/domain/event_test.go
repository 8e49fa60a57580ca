package domain

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestEventIDsSortByTime(t *testing.T) {
	base := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 200 {
		ids = append(ids, NewEventID(base.Add(time.Duration(i)*time.Millisecond)))
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids of later events do not sort after earlier ones")
	}
	if floor := EventIDFloor(base.Add(100 * time.Millisecond)); !(ids[99] < floor && floor <= ids[100]) {
		t.Fatalf("floor %s is not between %s and %s", floor, ids[99], ids[100])
	}
	if a, b := NewEventID(base), NewEventID(base); a == b || len(a) != 30 {
		t.Fatalf("ids %s %s", a, b)
	}
}

// An event stays a small item whatever a node reports as the error.
func TestEnvEventClipsTheError(t *testing.T) {
	e := Environment{OrgID: "acme", ID: "env_1", Template: "shell", State: StateFailed, StopReason: "failed",
		Error: strings.Repeat("é", 300_000)}
	ev := EnvEvent(context.Background(), e, time.Now())
	msg := ev.Data["error"].(string)
	if len(msg) > maxEventText || !strings.HasPrefix(e.Error, msg) || ev.Type != EventEnvFailed || ev.Data["reason"] != "failed" {
		t.Fatalf("error of %d bytes, type %s, data %v", len(msg), ev.Type, ev.Data["reason"])
	}
	if ActorFrom(context.Background()).Kind != "system" {
		t.Fatal("no actor in the context should be the service itself")
	}
}

func TestWebhookWants(t *testing.T) {
	for _, c := range []struct {
		types []string
		typ   string
		want  bool
	}{
		{[]string{"*"}, EventKeyRevoked, true},
		{[]string{"environment."}, EventEnvStopped, true},
		{[]string{"environment."}, EventKeyCreated, false},
		{[]string{"environment.stopped"}, EventEnvStopped, true},
		{[]string{"environment.stopped"}, EventEnvStopping, false},
		{[]string{"key.created", "quota.refused"}, EventQuotaRefused, true},
	} {
		if got := (Webhook{Types: c.types}).Wants(c.typ); got != c.want {
			t.Errorf("%v wants %s: %v", c.types, c.typ, got)
		}
	}
}

// A webhook receives what happened from its creation to its expiry.
func TestWebhookReceives(t *testing.T) {
	created := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	end := created.Add(time.Hour)
	for _, c := range []struct {
		name    string
		expires *time.Time
		at      time.Time
		want    bool
	}{
		{"before its creation", nil, created.Add(-time.Second), false},
		{"at its creation", nil, created, true},
		{"long after, without expiry", nil, created.Add(1000 * time.Hour), true},
		{"before its expiry", &end, end.Add(-time.Second), true},
		{"at its expiry", &end, end, false},
		{"after its expiry", &end, end.Add(time.Second), false},
	} {
		h := Webhook{Types: []string{"*"}, Created: created, Expires: c.expires}
		if got := h.Receives(EventKeyCreated, c.at); got != c.want {
			t.Errorf("%s: receives %v, want %v", c.name, got, c.want)
		}
	}
}
