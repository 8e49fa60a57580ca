package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// EventQuery filters GET /v1/events. The zero value is the first page of
// every event, of the service's default size.
type EventQuery struct {
	// Type is an event type ("environment.ready") or a kind prefix ending
	// in "." ("environment.").
	Type string
	// Subject is the resource as "KIND/ID", such as "environment/env_…".
	Subject string
	// Since keeps events at or after this time; the zero time keeps all.
	Since time.Time
	// Limit is the page size, 1 to 200 (0: the service's default, 50).
	Limit int
	// Cursor is the Next of the previous page of the same query.
	Cursor string
}

// ListEvents returns one page of the organization's events, newest first.
// A page may be short while Next is set (an exact type is filtered from a
// bounded page): follow Next until it is empty.
func (c *Client) ListEvents(ctx context.Context, q EventQuery) (domain.EventPage, error) {
	v := url.Values{}
	if q.Type != "" {
		v.Set("type", q.Type)
	}
	if q.Subject != "" {
		v.Set("subject", q.Subject)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	pageParams(v, q.Limit, q.Cursor)
	var out domain.EventPage
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/events", query: v, retry: true}, &out)
	return out, err
}

// WebhookCreate is the body of POST /v1/webhooks.
type WebhookCreate struct {
	// URL is an https URL on a public address.
	URL string `json:"url"`
	// Types are 1 to 32 event types, kind prefixes ending in "."
	// ("environment."), or "*" for every event.
	Types []string `json:"types"`
}

// CreatedWebhook is a new webhook and its signing secret, shown only here.
type CreatedWebhook struct {
	// Webhook is the new webhook's record.
	Webhook domain.Webhook `json:"webhook"`
	// Secret signs every delivery, for the receiver to check.
	Secret string `json:"secret"`
}

// CreateWebhook adds a webhook (admins). Not retried: it may have been created.
func (c *Client) CreateWebhook(ctx context.Context, w WebhookCreate) (CreatedWebhook, error) {
	var out CreatedWebhook
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/webhooks", body: w}, &out)
	return out, err
}

// ListWebhooks returns the organization's webhooks (admins).
func (c *Client) ListWebhooks(ctx context.Context) ([]domain.Webhook, error) {
	var out struct {
		Webhooks []domain.Webhook `json:"webhooks"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/webhooks", retry: true}, &out)
	return out.Webhooks, err
}

// DeleteWebhook removes a webhook (admins).
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/webhooks/" + seg(id), retry: true}, nil)
	return err
}

// ListDeliveries returns one page of a webhook's deliveries, newest first.
func (c *Client) ListDeliveries(ctx context.Context, id string, q PageQuery) (domain.DeliveryPage, error) {
	v := url.Values{}
	pageParams(v, q.Limit, q.Cursor)
	var out domain.DeliveryPage
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/webhooks/" + seg(id) + "/deliveries", query: v, retry: true}, &out)
	return out, err
}

// RetryDelivery queues a delivery again, due now; repeating it is harmless.
func (c *Client) RetryDelivery(ctx context.Context, id, delivery string) (domain.Delivery, error) {
	var out struct {
		Delivery domain.Delivery `json:"delivery"`
	}
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/webhooks/" + seg(id) + "/deliveries/" + seg(delivery) + "/retry", retry: true}, &out)
	return out.Delivery, err
}
