package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

func TestDuration(t *testing.T) {
	cases := []struct {
		in, out string
		ok      bool
	}{
		{"30m", "30m", true}, {"6h", "6h", true}, {"1h0m0s", "1h", true}, {"1h30m", "1h30m", true},
		{"45s", "45s", true}, {"1.5s", "1.5s", true}, {"0s", "0s", true}, {"-5m", "-5m", true},
		{"", "", false}, {"5", "", false}, {"five minutes", "", false}, {" 5m", "", false}, {"1d", "", false},
	}
	for _, c := range cases {
		d, err := domain.ParseDuration(c.in)
		if (err == nil) != c.ok {
			t.Errorf("%q: err %v", c.in, err)
			continue
		}
		if c.ok && d.String() != c.out {
			t.Errorf("%q: String %q want %q", c.in, d.String(), c.out)
		}
	}
	b, _ := json.Marshal(domain.Duration(90 * time.Minute))
	if string(b) != `"1h30m"` {
		t.Errorf("marshal %s", b)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30m", "6h", "1h0m0s", "-1s", "9999999999h", "1e9h", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := domain.ParseDuration(s)
		if err != nil {
			return
		}
		// What we print, we can read back to the same value.
		back, err := domain.ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("%q -> %q -> %v %v", s, d.String(), back, err)
		}
	})
}
