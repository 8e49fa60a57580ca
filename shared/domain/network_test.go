package domain_test

import (
	"errors"
	"testing"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/netpolicy"
)

func TestValidateEnvNetwork(t *testing.T) {
	rules := domain.Template{Name: "r", Network: domain.NetworkRules, NetworkRules: &netpolicy.Rules{Allow: []string{"github.com"}}}
	open := domain.Template{Name: "o", Network: domain.NetworkOpen}
	none := domain.Template{Name: "n"}
	for _, c := range []struct {
		name  string
		t     domain.Template
		n     domain.EnvNetwork
		field string
	}{
		{"narrowing", rules, domain.EnvNetwork{Allow: []string{"github.com:443"}}, ""},
		{"deny only", open, domain.EnvNetwork{Deny: []string{"*.example.com", "203.0.113.0/24"}}, ""},
		{"bad allow entry", rules, domain.EnvNetwork{Allow: []string{"github.com", "no such/thing"}}, "network.allow[1]"},
		{"bad deny entry", open, domain.EnvNetwork{Deny: []string{"x.com:99999"}}, "network.deny[0]"},
		{"no boundary", none, domain.EnvNetwork{Deny: []string{"x.com"}}, "network"},
	} {
		err := domain.ValidateEnvNetwork("network", c.t, c.n)
		var de *domain.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (!errors.As(err, &de) || de.Field != c.field || de.Code != domain.CodeInvalid):
			t.Errorf("%s: %v, want 422 on %s", c.name, err, c.field)
		}
	}
	// A layer with allow entries allows only them; without, what the
	// template allows less its deny entries.
	if p, err := (domain.EnvNetwork{Deny: []string{"x.com"}}).Policy(); err != nil || p.Mode != netpolicy.ModeOpen {
		t.Errorf("deny-only layer: %+v %v", p, err)
	}
	if p, err := (domain.EnvNetwork{Allow: []string{"x.com"}}).Policy(); err != nil || p.Mode != netpolicy.ModeRules {
		t.Errorf("allow layer: %+v %v", p, err)
	}
}
