package domain

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
	"unicode/utf8"
)

// Event types. Each is "<kind>.<what happened>"; the kind is the first
// segment, and `GET /v1/events?type=environment.` lists one kind.
const (
	EventEnvLeased   = "environment.leased"
	EventEnvStarting = "environment.starting"
	EventEnvReady    = "environment.ready"
	EventEnvStopping = "environment.stopping"
	EventEnvStopped  = "environment.stopped"
	EventEnvFailed   = "environment.failed"
	EventEnvExec     = "environment.exec"
	// An idle environment of a template whose idle action is pause was
	// paused (its checkpoint sealed, its node left), and a paused one woke.
	EventEnvPaused    = "environment.paused"
	EventEnvResumed   = "environment.resumed"
	EventArtSealed    = "artifact.sealed"
	EventArtExpired   = "artifact.expired"
	EventKeyCreated   = "key.created"
	EventKeyRevoked   = "key.revoked"
	EventSbxRegister  = "sandbox.registered"
	EventSbxJoined    = "sandbox.joined"
	EventQuotaRefused = "quota.refused"
	EventNodeRegister = "node.registered"
	EventNodeLost     = "node.lost"
	EventNodeLeft     = "node.left"
	EventWebhookOff   = "webhook.disabled"
	// A budget reached 80 % of its limit, or all of it, in its period.
	EventBudgetWarning = "budget.warning"
	EventBudgetSpent   = "budget.spent"
	// A trusted OIDC issuer registered or removed, and a CI identity
	// token of it that an exchange refused (the granted ones are the
	// key.created of the token they bought).
	EventIssuerTrusted = "issuer.trusted"
	EventIssuerRemoved = "issuer.removed"
	EventIssuerRefused = "issuer.refused"
)

// EventEnvFiles is a write ticket for an environment's files: every write
// is on record, coalesced per ticket (docs/files.md).
const EventEnvFiles = "environment.files"

// EventTypes are every type the service writes, in documentation order.
var EventTypes = []string{
	EventEnvLeased, EventEnvStarting, EventEnvReady, EventEnvStopping, EventEnvStopped, EventEnvFailed, EventEnvExec,
	EventEnvPaused, EventEnvResumed,
	EventEnvFiles,
	EventEnvNetRefused,
	EventEnvPreview, EventEnvPreviewRevoked,
	EventArtSealed, EventArtExpired, EventKeyCreated, EventKeyRevoked, EventSbxRegister, EventSbxJoined,
	EventQuotaRefused, EventNodeRegister, EventNodeLost, EventNodeLeft, EventWebhookOff,
	EventBudgetWarning, EventBudgetSpent,
	EventIssuerTrusted, EventIssuerRemoved, EventIssuerRefused,
	EventSecretSet, EventSecretDeleted,
}

// EventKind is the first segment of an event type ("environment").
func EventKind(typ string) string {
	k, _, _ := strings.Cut(typ, ".")
	return k
}

// KnownEventType reports whether t is one of EventTypes.
func KnownEventType(t string) bool {
	for _, x := range EventTypes {
		if x == t {
			return true
		}
	}
	return false
}

// EventRetention is how long events are kept (the item's ttl) and how far
// back `GET /v1/events` reads.
const EventRetention = 30 * 24 * time.Hour

// Actor says who caused an event: a person ("user"), an organization key or
// a node credential ("key", "node"), or the service itself ("system": the
// timeout, expiry and delivery jobs).
type Actor struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// Subject is the resource an event is about.
type Subject struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// String renders a subject as the `subject` query parameter takes it.
func (s Subject) String() string { return s.Kind + "/" + s.ID }

// Event is one entry of an organization's outbox. It is written in the same
// DynamoDB transaction as the change it reports.
type Event struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Time    time.Time      `json:"time"`
	OrgID   string         `json:"org"`
	Actor   Actor          `json:"actor"`
	Subject Subject        `json:"subject"`
	Data    map[string]any `json:"data"`
}

// EventPage is one page of an event listing.
type EventPage struct {
	Events []Event `json:"events"`
	Next   string  `json:"next"`
}

// EventQuery is what `GET /v1/events` asks for. Type is "" (any), an exact
// type, or a kind prefix ending in "." ("environment.").
type EventQuery struct {
	Type    string
	Subject *Subject
	Since   time.Time
	Limit   int
	Cursor  string
}

var eventIDEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewEventID returns "evt_" + 26 characters that sort by t (millisecond
// precision, then randomness): string order of ids is time order, so the
// listing's sort key is the id itself.
func NewEventID(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return "evt_" + eventIDEncoding.EncodeToString(b[:])
}

// EventIDFloor is the smallest id an event at or after t can have.
func EventIDFloor(t time.Time) string {
	var b [16]byte
	ms := t.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	binary.BigEndian.PutUint64(b[:8], uint64(ms)<<16)
	return "evt_" + eventIDEncoding.EncodeToString(b[:])
}

type actorKey struct{}

// WithActor returns ctx carrying who acts in it: the store stamps it on the
// events it writes, so no write's signature has to carry it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom is the actor of ctx; the service itself when none was set.
func ActorFrom(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok {
		return a
	}
	return Actor{Kind: "system", ID: "envlease"}
}

// ActorOf is the actor a principal acts as.
func ActorOf(p Principal) Actor {
	switch {
	case p.Credential == CredentialNode:
		return Actor{Kind: "node", ID: p.KeyID}
	case p.UserID != "":
		return Actor{Kind: "user", ID: p.UserID}
	default:
		return Actor{Kind: "key", ID: p.KeyID}
	}
}

// maxEventText bounds a free-text field of an event (an error message), so
// an event stays a small item whatever a node reports.
const maxEventText = 1024

func clip(s string) string {
	if len(s) <= maxEventText {
		return s
	}
	s = s[:maxEventText]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// NewEvent builds an event of org at t by actor.
func NewEvent(ctx context.Context, typ, org string, subject Subject, t time.Time, data map[string]any) Event {
	if data == nil {
		data = map[string]any{}
	}
	return Event{ID: NewEventID(t), Type: typ, Time: t.UTC(), OrgID: org, Actor: ActorFrom(ctx), Subject: subject, Data: data}
}

// EnvEventType is the event of an environment entering state st.
func EnvEventType(st State) string {
	switch st {
	case StatePending:
		return EventEnvLeased
	case StateStarting:
		return EventEnvStarting
	case StateReady:
		return EventEnvReady
	case StateStopping:
		return EventEnvStopping
	case StateStopped:
		return EventEnvStopped
	case StateFailed:
		return EventEnvFailed
	case StatePaused:
		return EventEnvPaused
	}
	return ""
}

// EnvEvent is the event of e having just entered its state, at t. Its data:
// template, name and state always; node once claimed; reason with stopping,
// stopped and failed; error with failed; readyMs with ready.
func EnvEvent(ctx context.Context, e Environment, t time.Time) Event {
	data := map[string]any{"template": e.Template, "name": e.Name, "state": string(e.State)}
	if e.Node != "" {
		data["node"] = e.Node
	}
	switch e.State {
	case StatePending:
		data["pool"] = e.Pool
		data["expires"] = e.Expires
	case StateReady:
		if e.ReadyMs != nil {
			data["readyMs"] = *e.ReadyMs
		}
	case StatePaused:
		data["reason"] = e.StopReason
		if e.Snapshot != "" {
			data["checkpoint"] = e.Snapshot
		}
		if e.RetainUntil != nil {
			data["retainUntil"] = *e.RetainUntil
		}
	case StateStopping, StateStopped, StateFailed:
		if e.StopReason != "" {
			data["reason"] = e.StopReason
		}
		if e.State == StateFailed || e.Error != "" {
			data["error"] = clip(e.Error)
		}
	}
	return NewEvent(ctx, EnvEventType(e.State), e.OrgID, Subject{Kind: "environment", ID: e.ID}, t, data)
}

// EnvResumedEvent is the event of a paused environment waking: pending
// again, restored on a node from its checkpoint (data: template, name,
// state, pool, checkpoint).
func EnvResumedEvent(ctx context.Context, e Environment, t time.Time) Event {
	data := map[string]any{"template": e.Template, "name": e.Name, "state": string(e.State), "pool": e.Pool, "checkpoint": e.Snapshot}
	return NewEvent(ctx, EventEnvResumed, e.OrgID, Subject{Kind: "environment", ID: e.ID}, t, data)
}
