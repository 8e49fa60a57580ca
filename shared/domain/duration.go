package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Duration is a time.Duration that travels as a string such as "30m" or "6h".
// It accepts Go's form ("1h0m0s") too, and writes the shortest exact form.
type Duration time.Duration

// ParseDuration parses a duration string. It refuses anything that is not a
// Go duration; callers decide whether zero or negative values are acceptable.
func ParseDuration(s string) (Duration, error) {
	if strings.TrimSpace(s) != s || s == "" {
		return 0, fmt.Errorf("%q is not a duration such as 30m or 6h", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30m or 6h", s)
	}
	return Duration(d), nil
}

// Std returns the value as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String writes the shortest exact form: 6h, 1h30m, 45s, 1.5s.
func (d Duration) String() string {
	t := time.Duration(d)
	if t == 0 {
		return "0s"
	}
	s := t.String()
	// time.Duration.String gives "1h0m0s"; trim zero units for readability.
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a duration string such as \"30m\"")
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Seconds returns whole seconds, for storage.
func (d Duration) Seconds() int64 { return int64(time.Duration(d) / time.Second) }
