package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Headers of a delivery. SignatureHeader carries "t=<unix seconds>,v1=<hex>",
// v1 being HMAC-SHA256 with the webhook's secret over "<t>.<body>": the
// timestamp is signed, so a receiver that rejects old ones also rejects
// replays of a captured delivery.
const (
	SignatureHeader = "Envlease-Signature"
	EventIDHeader   = "Envlease-Event-Id"
	EventTypeHeader = "Envlease-Event-Type"
	DeliveryHeader  = "Envlease-Delivery"
)

// SecretPrefix starts every signing secret, so one is recognisable in a
// receiver's configuration.
const SecretPrefix = "whsec_"

// NewSecret draws a signing secret: SecretPrefix and 256 bits, hex.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return SecretPrefix + hex.EncodeToString(b)
}

// Sign returns the SignatureHeader value of body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
