package domain_test

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/domain"
)

var labelKey = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)

// FuzzValidateLabels: no input panics, every refusal is a 422 naming the
// labels field, and whatever is accepted obeys every label rule.
func FuzzValidateLabels(f *testing.F) {
	for _, s := range []struct {
		k, v string
		n    uint8
	}{{"team", "web", 1}, {"a.b-c_d", "", 1}, {"-x", "v", 1}, {"x-", "v", 1}, {"A", "v", 1}, {"k", "\x00", 1},
		{"k", "\xff", 1}, {strings.Repeat("k", 64), "v", 1}, {"k", strings.Repeat("v", 257), 1}, {"k", "v", 33}, {"é", "ü", 1}} {
		f.Add(s.k, s.v, s.n)
	}
	f.Fuzz(func(t *testing.T, k, v string, n uint8) {
		labels := map[string]string{}
		for i := 0; i < int(n%40); i++ {
			labels[k+strings.Repeat("x", i)] = v
		}
		if n%40 == 0 {
			labels[k] = v
		}
		err := domain.ValidateLabels(labels)
		if err != nil {
			e := domain.AsError(err)
			if e.Code != domain.CodeInvalid || !strings.HasPrefix(e.Field, "labels") {
				t.Fatalf("refusal %+v", e)
			}
			return
		}
		if len(labels) > domain.MaxLabels {
			t.Fatalf("accepted %d labels", len(labels))
		}
		for k, v := range labels {
			if len(k) > 63 || !labelKey.MatchString(k) || len(v) > domain.MaxLabelValueLen || !utf8.ValidString(v) ||
				strings.IndexFunc(v, unicode.IsControl) >= 0 {
				t.Fatalf("accepted %q=%q", k, v)
			}
		}
	})
}
