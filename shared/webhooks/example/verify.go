// Package example is the receiver code docs/events.md shows, verbatim: a test
// checks real deliveries with it.
package example

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Receiver is an http.Handler for envlease deliveries: it answers 400 to a
// delivery whose signature does not check or is older than 5 minutes, and
// otherwise hands the event's JSON to handle (2xx when it returns nil, 500
// when not, so envlease tries again later). Deliveries are at least once:
// handle should ignore an Envlease-Event-Id it has already seen.
func Receiver(secret string, handle func(event []byte) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := Verify(secret, r.Header.Get("Envlease-Signature"), body, time.Now(), 5*time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := handle(body); err != nil {
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// Verify checks the Envlease-Signature header of a webhook delivery: an
// HMAC-SHA256 with the webhook's secret over "<t>.<body>", sent at most
// tolerance ago (or ahead, for clock skew).
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("stale timestamp")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("signature does not match")
}
