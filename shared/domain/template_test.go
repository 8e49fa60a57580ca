package domain_test

import (
	"errors"
	"testing"

	"github.com/envlease/envlease/shared/domain"
)

func TestTemplateNetwork(t *testing.T) {
	for _, c := range []struct {
		network string
		ok      bool
		egress  bool
		shown   string
	}{
		{"", true, false, "none"},
		{"none", true, false, "none"},
		{"egress", true, true, "egress"},
		{"host", false, false, ""},
		{"Egress", false, false, ""},
	} {
		tpl := domain.Template{Name: "t", Network: c.network}
		err := tpl.ValidateLimits()
		var de *domain.Error
		switch {
		case c.ok && err != nil:
			t.Errorf("network %q: %v", c.network, err)
		case !c.ok && (!errors.As(err, &de) || de.Code != domain.CodeInvalid || de.Field != "network"):
			t.Errorf("network %q: %v, want a 422 naming network", c.network, err)
		}
		if !c.ok {
			continue
		}
		if tpl.Egress() != c.egress {
			t.Errorf("network %q: Egress() = %v", c.network, tpl.Egress())
		}
		if got := tpl.Normalized().Network; got != c.shown {
			t.Errorf("network %q normalized: %q, want %q", c.network, got, c.shown)
		}
	}
}
