package domain

import "time"

// Webhook states. A webhook whose deliveries keep failing is disabled by the
// delivery job, with a webhook.disabled event.
const (
	WebhookEnabled  = "enabled"
	WebhookDisabled = "disabled"
)

// Webhook is an organization's receiver of events. Secret is shown once, in
// the answer to its creation, and otherwise only used to sign deliveries.
type Webhook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Types     []string  `json:"types"`
	State     string    `json:"state"`
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"createdBy"`
	// Expires ends its deliveries: events from then on are not sent to
	// it. Inherited from a scoped or restricted token that created it;
	// nil for never.
	Expires *time.Time `json:"expires,omitempty"`
	// Disabled says when and why the delivery job disabled it.
	Disabled       *time.Time `json:"disabled,omitempty"`
	DisabledReason string     `json:"disabledReason,omitempty"`
	SecretPrefix   string     `json:"secretPrefix"`

	OrgID  string `json:"-"`
	Secret string `json:"-"`
}

// Receives reports whether the webhook takes events of type t that
// happened at at: from its creation to its expiry.
func (w Webhook) Receives(t string, at time.Time) bool {
	return w.Wants(t) && !at.Before(w.Created) && (w.Expires == nil || at.Before(*w.Expires))
}

// Wants reports whether the webhook takes events of type t: an exact type
// or a kind prefix ("environment.") among its types, or "*".
func (w Webhook) Wants(t string) bool {
	for _, x := range w.Types {
		if x == "*" || x == t || (len(x) > 0 && x[len(x)-1] == '.' && EventKind(t)+"." == x) {
			return true
		}
	}
	return false
}

// Delivery states.
const (
	DeliveryPending   = "pending"   // waiting for its next try
	DeliverySucceeded = "succeeded" // a 2xx came back
	DeliveryFailed    = "failed"    // retries ran out (24 h), or the webhook was deleted
	// DeliveryHeld waits, unsent and out of the due index, while its webhook
	// is disabled; turning the webhook back on queues it again.
	DeliveryHeld = "held"
)

// Attempt is one POST of a delivery.
type Attempt struct {
	At         time.Time `json:"at"`
	StatusCode int       `json:"statusCode"`
	DurationMs int64     `json:"durationMs"`
	Error      string    `json:"error,omitempty"`
}

// Delivery is one event on its way to one webhook: every attempt is kept.
type Delivery struct {
	ID      string     `json:"id"`
	Webhook string     `json:"webhook"`
	Event   string     `json:"event"`
	Type    string     `json:"type"`
	State   string     `json:"state"`
	Created time.Time  `json:"created"`
	NextTry *time.Time `json:"nextTry"`
	// Retried is when it was last put back in the queue by hand: its 24
	// hours of retries count from then.
	Retried   *time.Time `json:"retried,omitempty"`
	Attempts  []Attempt  `json:"attempts"`
	LastCode  int        `json:"statusCode"`
	LastMs    int64      `json:"durationMs"`
	LastError string     `json:"error,omitempty"`

	OrgID string `json:"-"`
	// Body is the event as delivered (its JSON), fixed at fan-out so every
	// attempt sends the same bytes.
	Body    []byte `json:"-"`
	Version int64  `json:"-"`
}

// DeliveryPage is one page of a webhook's deliveries, newest first.
type DeliveryPage struct {
	Deliveries []Delivery `json:"deliveries"`
	Next       string     `json:"next"`
}

// OutboxEntry is one due entry of the webhook outbox: an event to fan out to
// the organization's webhooks, or a delivery to try.
type OutboxEntry struct {
	Event    *Event
	Delivery *Delivery
}
