package ticket

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func claims() Claims {
	return Claims{Org: "acme", Env: "env_1", Node: "node_1", Targets: []string{"10.0.3.7:8080"}, Exp: now.Add(5 * time.Minute).Unix()}
}

// A ticket says what it was signed with, to the holder of the key and to
// no one else, until it expires (give or take the clocks' leeway).
func TestSignAndVerify(t *testing.T) {
	tk, err := Sign(key(1), claims())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(key(1), tk, now)
	if err != nil || c.Env != "env_1" || c.Org != "acme" || c.Node != "node_1" || !c.Allows("10.0.3.7:8080") || c.Allows("10.0.3.7:22") {
		t.Fatalf("verify: %+v %v", c, err)
	}
	if _, err := Verify(key(2), tk, now); !errors.Is(err, ErrSignature) {
		t.Fatalf("another key: %v", err)
	}
	if _, err := Verify(key(1), tk, now.Add(5*time.Minute+Leeway)); err != nil {
		t.Fatalf("within the leeway: %v", err)
	}
	if _, err := Verify(key(1), tk, now.Add(5*time.Minute+Leeway+time.Second)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	// Changing what it says breaks the signature, however it is re-encoded.
	p, s, _ := strings.Cut(tk, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(p)
	forged := strings.Replace(string(raw), "env_1", "env_2", 1)
	if _, err := Verify(key(1), base64.RawURLEncoding.EncodeToString([]byte(forged))+"."+s, now); !errors.Is(err, ErrSignature) {
		t.Fatalf("forged payload: %v", err)
	}
	for _, bad := range []string{"", ".", tk + ".x", "abc", p + ".!!", strings.Repeat("a", MaxLen+1)} {
		if _, err := Verify(key(1), bad, now); !errors.Is(err, ErrMalformed) {
			t.Errorf("%.20q: %v", bad, err)
		}
	}
	if _, err := Sign([]byte("short"), claims()); err == nil {
		t.Fatal("a short key signed")
	}
}

// A correctly signed payload that is not a ticket (fields missing or
// unknown) is still refused.
func TestVerifyRefusesIncompleteClaims(t *testing.T) {
	for _, payload := range []string{`{"org":"acme","env":"env_1","node":"node_1","targets":[]}`, `{"org":"acme","env":"env_1","node":"node_1","targets":[],"exp":1,"admin":true}`, `[]`} {
		tk := base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(mac(key(1), []byte(payload)))
		if _, err := Verify(key(1), tk, time.Unix(0, 0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", payload, err)
		}
	}
}
