// Package events serves an organization's events (GET /v1/events): what the
// outbox recorded, newest first, one DynamoDB Query per page.
package events

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Store is what the events service needs.
type Store interface {
	ListEvents(ctx context.Context, org string, q domain.EventQuery, now time.Time) (domain.EventPage, error)
}

// Page sizes of the listing.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// Service lists events.
type Service struct {
	store Store
	clock clock.Clock
}

// NewService returns the events service.
func NewService(st Store, clk clock.Clock) *Service { return &Service{store: st, clock: clk} }

// Routes is the events group: members read their organization's events.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/v1/events", Access: httpapi.Member, Handler: s.handleList},
	}
}

// subjectKinds are the kinds of resource events are about.
var subjectKinds = map[string]bool{
	"environment": true, "artifact": true, "key": true, "sandbox": true, "template": true, "node": true, "webhook": true,
	"budget": true,
}

// ParseQuery reads the listing's query parameters; anything malformed is 400
// naming the parameter.
func ParseQuery(r *http.Request) (domain.EventQuery, error) {
	pg, q, err := httpapi.ParsePage(r, MaxLimit, "type", "subject", "since")
	if err != nil {
		return domain.EventQuery{}, err
	}
	out := domain.EventQuery{Limit: pg.Limit, Cursor: pg.Cursor}
	if out.Limit == 0 {
		out.Limit = DefaultLimit
	}
	if t := q.Get("type"); t != "" {
		kind, rest, dotted := strings.Cut(t, ".")
		known := false
		for _, x := range domain.EventTypes {
			if x == t || (rest == "" && dotted && domain.EventKind(x) == kind) {
				known = true
			}
		}
		if !known {
			return domain.EventQuery{}, domain.BadRequest("type", "type must be an event type (%s) or a kind prefix ending in \".\" such as \"environment.\"", strings.Join(domain.EventTypes, ", "))
		}
		out.Type = t
	}
	if s := q.Get("subject"); s != "" {
		kind, id, ok := strings.Cut(s, "/")
		if !ok || !subjectKinds[kind] || id == "" || len(id) > 128 || strings.ContainsAny(id, "#/ ") {
			return domain.EventQuery{}, domain.BadRequest("subject", "subject must be KIND/ID, KIND one of environment, artifact, key, sandbox, template, node, webhook")
		}
		out.Subject = &domain.Subject{Kind: kind, ID: id}
	}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return domain.EventQuery{}, domain.BadRequest("since", "since must be an RFC 3339 time, such as 2026-01-02T15:04:05Z")
		}
		out.Since = t.UTC()
	}
	return out, nil
}

// List returns one page of the caller's organization's events. A member
// sees what GET /v1/keys shows them: of the key events, only those of their
// own CLI tokens (other people's tokens, organization keys and node
// credentials are the admins'). A page thinned so may be short while its
// next is set, as an exact type's page already may.
func (s *Service) List(ctx context.Context, p domain.Principal, q domain.EventQuery) (domain.EventPage, error) {
	page, err := s.store.ListEvents(ctx, p.OrgID, q, s.clock.Now())
	if err != nil || p.IsAdmin() {
		return page, err
	}
	kept := page.Events[:0]
	for _, ev := range page.Events {
		if ev.Subject.Kind != "key" || ownKeyEvent(ev, p) {
			kept = append(kept, ev)
		}
	}
	page.Events = kept
	return page, nil
}

// ownKeyEvent reports whether a key event is about a token of p's own: its
// owner (the data's owner, a domain.Owner, or the map it reads back as) is
// the user p.
func ownKeyEvent(ev domain.Event, p domain.Principal) bool {
	if p.UserID == "" {
		return false
	}
	b, err := json.Marshal(ev.Data["owner"])
	if err != nil {
		return false
	}
	var o struct{ Kind, ID string }
	if json.Unmarshal(b, &o) != nil {
		return false
	}
	return o.Kind == "user" && o.ID == p.UserID
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	q, err := ParseQuery(r)
	if err != nil {
		return err
	}
	page, err := s.List(r.Context(), p, q)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, page)
	return nil
}
