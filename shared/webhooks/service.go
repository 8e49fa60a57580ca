// Package webhooks manages an organization's webhooks (admins create, list
// and delete them), shows their deliveries, retries one by hand, and runs the
// delivery job that works through the outbox (deliver.go).
package webhooks

import (
	"context"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// Store is what the webhooks service and the delivery job need.
type Store interface {
	PutWebhook(ctx context.Context, w domain.Webhook) error
	CreateWebhook(ctx context.Context, w domain.Webhook, limit int) error
	ListWebhooks(ctx context.Context, org string) ([]domain.Webhook, error)
	GetWebhook(ctx context.Context, org, id string) (domain.Webhook, error)
	DeleteWebhook(ctx context.Context, org, id string) error
	EnableWebhook(ctx context.Context, org, id string) (domain.Webhook, error)
	GetDelivery(ctx context.Context, org, hook, id string) (domain.Delivery, error)
	ListDeliveries(ctx context.Context, org, hook string, limit int, cursor string) (domain.DeliveryPage, error)
	SaveDelivery(ctx context.Context, before, after domain.Delivery, disable *domain.Event) (bool, error)
	OutboxShards() int
	DueOutbox(ctx context.Context, shard int, now time.Time, limit int, cursor string) ([]domain.OutboxEntry, string, error)
	ReleaseHeld(ctx context.Context, org, hook string, now time.Time, limit int) (int, bool, error)
	FanOut(ctx context.Context, ev domain.Event, deliveries []domain.Delivery) (bool, error)
}

// MaxWebhooks bounds an organization's webhooks, enforced by a count kept
// in the same transaction as each create and delete: an event's fan-out to
// all of them is one transaction (at most 100 items, one of them the event;
// store.FanOut copes with more, should there be).
const MaxWebhooks = 20

// MaxTypes bounds the types a webhook lists: room for every event type and
// every kind prefix, with some to spare.
const MaxTypes = 64

// Service holds the webhook rules.
type Service struct {
	store Store
	clock clock.Clock
	guard Guard
}

// NewService returns the webhooks service.
func NewService(st Store, clk clock.Clock, g Guard) *Service {
	return &Service{store: st, clock: clk, guard: g}
}

// Created is a new webhook with its signing secret, shown only this once.
type Created struct {
	Webhook domain.Webhook `json:"webhook"`
	Secret  string         `json:"secret"`
}

// CreateRequest is the body of POST /v1/webhooks.
type CreateRequest struct {
	URL   string   `json:"url"`
	Types []string `json:"types"`
}

// Heir is what a webhook carries of the token that creates it: no scopes
// (it acts with events:read) and no restrictions, and a limited maker's
// expiry.
var Heir = auth.Heir{What: "a webhook", ActsWith: []string{domain.ScopeEventsRead}}

// Create adds a webhook. Admins only (the route says so).
func (s *Service) Create(ctx context.Context, p domain.Principal, req CreateRequest) (Created, error) {
	u, err := s.guard.CheckURL(ctx, req.URL)
	if err != nil {
		return Created{}, err
	}
	types, err := checkTypes(req.Types)
	if err != nil {
		return Created{}, err
	}
	// It receives the organization's events long after this request, as
	// events:read would: a scoped maker must hold that scope, a restricted
	// one is refused (events are not filtered by restrictions), and a
	// scoped maker's expiry ends its deliveries.
	lim, err := auth.Inherit(p, Heir, auth.Limits{})
	if err != nil {
		return Created{}, err
	}
	secret := NewSecret()
	w := domain.Webhook{
		ID: auth.NewID("whk_"), URL: u, Types: types, State: domain.WebhookEnabled, Created: s.clock.Now(), Expires: lim.Expires,
		CreatedBy: p.Actor(), OrgID: p.OrgID, Secret: secret, SecretPrefix: secret[:len(SecretPrefix)+6],
	}
	if err := s.store.CreateWebhook(ctx, w, MaxWebhooks); err != nil {
		return Created{}, err
	}
	return Created{Webhook: w, Secret: secret}, nil
}

// checkTypes accepts known types, kind prefixes ("environment.") and "*".
func checkTypes(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, domain.Invalid("types", `types is required: event types, kind prefixes such as "environment.", or "*" for every event`)
	}
	if len(in) > MaxTypes {
		return nil, domain.Invalid("types", "at most %d types", MaxTypes)
	}
	kinds := map[string]bool{}
	for _, t := range domain.EventTypes {
		kinds[domain.EventKind(t)+"."] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, t := range in {
		if !(t == "*" || domain.KnownEventType(t) || kinds[t]) {
			return nil, domain.Invalid("types", "unknown event type %q; known: %s, a kind prefix ending in \".\", or \"*\"", t, strings.Join(domain.EventTypes, ", "))
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

// List returns the organization's webhooks (never their secrets).
func (s *Service) List(ctx context.Context, p domain.Principal) ([]domain.Webhook, error) {
	return s.store.ListWebhooks(ctx, p.OrgID)
}

// Delete removes a webhook; its pending deliveries end as failed, its held
// ones stay held until their ttl.
func (s *Service) Delete(ctx context.Context, p domain.Principal, id string) error {
	return s.store.DeleteWebhook(ctx, p.OrgID, id)
}

// Deliveries lists a webhook's deliveries, newest first.
func (s *Service) Deliveries(ctx context.Context, p domain.Principal, id string, limit int, cursor string) (domain.DeliveryPage, error) {
	if _, err := s.store.GetWebhook(ctx, p.OrgID, id); err != nil {
		return domain.DeliveryPage{}, err
	}
	if limit == 0 {
		limit = 50
	}
	return s.store.ListDeliveries(ctx, p.OrgID, id, limit, cursor)
}

// maxRelease bounds the held deliveries one retry by hand queues again: a
// webhook disabled for long may hold many (up to the ttl's worth); each
// further retry releases the next ones.
const maxRelease = 1000

// Retry puts a delivery back in the queue, due now, whatever its state, with
// a fresh 24 hours of retries. Retrying by hand is also how a disabled
// webhook is turned back on, once its receiver is fixed: the deliveries held
// while it was disabled are queued again with it (up to maxRelease a call).
func (s *Service) Retry(ctx context.Context, p domain.Principal, hook, id string) (domain.Delivery, error) {
	w, err := s.store.GetWebhook(ctx, p.OrgID, hook)
	if err != nil {
		return domain.Delivery{}, err
	}
	d, err := s.store.GetDelivery(ctx, p.OrgID, hook, id)
	if err != nil {
		return domain.Delivery{}, err
	}
	if w.State == domain.WebhookDisabled {
		if _, err := s.store.EnableWebhook(ctx, p.OrgID, hook); err != nil {
			return domain.Delivery{}, err
		}
	}
	now := s.clock.Now()
	// Enabled first, released after: a delivery held by a job that read the
	// webhook disabled just before is still found here.
	if _, _, err := s.store.ReleaseHeld(ctx, p.OrgID, hook, now, maxRelease); err != nil {
		return domain.Delivery{}, err
	}
	if d, err = s.store.GetDelivery(ctx, p.OrgID, hook, id); err != nil {
		return domain.Delivery{}, err
	}
	if d.State == domain.DeliveryPending {
		return d, nil // already queued: the job will try it
	}
	after := d
	after.State = domain.DeliveryPending
	after.NextTry = &now
	after.Retried = &now
	ok, err := s.store.SaveDelivery(ctx, d, after, nil)
	if err != nil {
		return domain.Delivery{}, err
	}
	if !ok {
		return domain.Delivery{}, domain.Errorf(domain.CodeConflict, "the delivery changed meanwhile; retry")
	}
	after.Version++
	return after, nil
}
