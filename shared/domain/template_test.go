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

// resources.memory and resources.disk are sizes; a disk beyond what any
// node gives is refused: each a 422 naming the field.
func TestTemplateResourceSizes(t *testing.T) {
	for _, c := range []struct {
		memory, disk string
		field        string // "" when valid
	}{
		{"", "", ""},
		{"512Mi", "10Gi", ""},
		{"2G", "100Gi", ""},
		{"lots", "", "resources.memory"},
		{"", "10 GiB", "resources.disk"},
		{"", "0", "resources.disk"},
		{"", "-1Gi", "resources.disk"},
		{"", "101Gi", "resources.disk"},
		{"", "1Ti", "resources.disk"},
	} {
		tpl := domain.Template{Name: "t", Resources: domain.Resources{Memory: c.memory, Disk: c.disk}}
		err := tpl.ValidateLimits()
		var de *domain.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("memory %q, disk %q: %v", c.memory, c.disk, err)
		case c.field != "" && (!errors.As(err, &de) || de.Code != domain.CodeInvalid || de.Field != c.field):
			t.Errorf("memory %q, disk %q: %v, want a 422 naming %s", c.memory, c.disk, err, c.field)
		}
	}
}
