// Package ticket is the tunnel ticket: what the API hands a client so that
// a node's agent lets it reach one environment's exports. The service signs
// it with the node's tunnel key (made at registration, known only to the
// service and that node), and the agent checks it alone, without a call to
// the API:
//
//	base64url(payload) "." base64url(HMAC-SHA256(key, payload))
//
// payload being the JSON {"org", "env", "node", "targets": ["host:port"...],
// "exp": <Unix seconds>}, base64url without padding. A ticket that opens
// something other than a tunnel names it in "open" (OpenExec: a command
// inside the environment, whose argv's digest is "cmd"; OpenLogs: its log); a tunnel ticket has
// neither, so an agent refuses a ticket for its tunnel that opens anything else. It depends on nothing
// but the standard library, so the environments function that signs and the
// agent that checks share it without pulling in each other's code.
package ticket

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// KeySize is the size of a node's tunnel key in bytes.
const KeySize = 32

// MaxLen bounds a ticket; anything longer is refused before it is decoded.
// An environment's exports are few, so real tickets are far shorter.
const MaxLen = 16 << 10

// Leeway is how far past exp a ticket is still accepted: the service's and
// the node's clocks are not the same clock.
const Leeway = 30 * time.Second

// Claims are what a ticket says.
type Claims struct {
	Org  string `json:"org"`
	Env  string `json:"env"`
	Node string `json:"node"`
	// Targets are the environment's export targets (host:port) when the
	// ticket was issued; the agent connects to nothing else.
	Targets []string `json:"targets"`
	// Exp is when the ticket ends, in Unix seconds.
	Exp int64 `json:"exp"`
	// Open is what the ticket opens: "" for a tunnel to Targets, or one
	// of the Open constants.
	Open string `json:"open,omitempty"`
	// Command is, for OpenExec, CommandDigest of the one command the
	// ticket runs: the API records who ran what, and the agent runs
	// nothing else.
	Command string `json:"cmd,omitempty"`
	// Preview and Host are, for OpenPreview, the preview's id (which the
	// node can hear is revoked) and the one host name the ticket is good
	// for, so a cookie copied to another preview's host opens nothing.
	Preview string `json:"pv,omitempty"`
	Host    string `json:"host,omitempty"`
	// Path and Write are, for OpenFiles, the path the ticket opens (and
	// what is below it) and whether it may change files there.
	Path  string `json:"path,omitempty"`
	Write bool   `json:"write,omitempty"`
}

// Expires is Exp as a time.
func (c Claims) Expires() time.Time { return time.Unix(c.Exp, 0).UTC() }

// Allows reports whether target is one of the ticket's targets.
func (c Claims) Allows(target string) bool {
	for _, t := range c.Targets {
		if t == target {
			return true
		}
	}
	return false
}

// Errors of Verify. A malformed or badly signed ticket is not worth
// describing further: it was not issued for this node.
var (
	ErrMalformed = errors.New("malformed tunnel ticket")
	ErrSignature = errors.New("the tunnel ticket's signature does not match this node's key")
	ErrExpired   = errors.New("the tunnel ticket has expired; ask the API for a new one")
)

var b64 = base64.RawURLEncoding

// Sign returns the ticket for c, signed with key.
func Sign(key []byte, c Claims) (string, error) {
	if len(key) < KeySize {
		return "", fmt.Errorf("tunnel key of %d bytes, want %d", len(key), KeySize)
	}
	if c.Targets == nil {
		c.Targets = []string{}
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return b64.EncodeToString(payload) + "." + b64.EncodeToString(mac(key, payload)), nil
}

// Verify checks a ticket's signature with key and that it has not expired
// at now (give or take Leeway), and returns what it says. Whether it names
// this node, its organization and an environment it runs is the caller's
// to check.
func Verify(key []byte, ticket string, now time.Time) (Claims, error) {
	if len(key) < KeySize || len(ticket) > MaxLen {
		return Claims{}, ErrMalformed
	}
	p, s, ok := strings.Cut(ticket, ".")
	if !ok || p == "" || s == "" || strings.Contains(s, ".") {
		return Claims{}, ErrMalformed
	}
	payload, err := b64.DecodeString(p)
	if err != nil {
		return Claims{}, ErrMalformed
	}
	sig, err := b64.DecodeString(s)
	if err != nil {
		return Claims{}, ErrMalformed
	}
	// The signature is checked before the payload is read at all.
	if !hmac.Equal(sig, mac(key, payload)) {
		return Claims{}, ErrSignature
	}
	var c Claims
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() {
		return Claims{}, ErrMalformed
	}
	if c.Org == "" || c.Env == "" || c.Node == "" || c.Exp == 0 {
		return Claims{}, ErrMalformed
	}
	if !c.Valid(now) {
		return Claims{}, ErrExpired
	}
	return c, nil
}

// Valid reports whether c is still valid at now, for a check made after
// Verify (each new stream of a long tunnel).
func (c Claims) Valid(now time.Time) bool { return !now.After(c.Expires().Add(Leeway)) }

func mac(key, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(payload)
	return h.Sum(nil)
}
