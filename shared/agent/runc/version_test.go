package runc

import (
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/runc/pinned"
)

func TestCheckVersion(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"runc version 1.1.5+ds1", false}, // Debian 12's: CVE-2024-21626 backported, not the 2025 escapes
		{"runc version 1.1.12", false},
		{"runc version 1.2.7", false},
		{"runc version 1.2.8", true},
		{"runc version 1.3.2", false},
		{"runc version 1.3.3", true},
		{"runc version 1.4.0-rc.2", false},
		{"runc version 1.4.0-rc.3", true},
		{"runc version 1.4.0", true},
		{"runc version 1.5.0-rc.1", true},
		{"runc version " + strings.TrimPrefix(pinned.Version, "v"), true},
		{"runc version 2.0.0", true},
		{"runc version unknown", false},
		{"", false},
	} {
		err := CheckVersion(c.line)
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.line, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), pinned.Version) {
			t.Errorf("%q: the refusal does not say what to install: %v", c.line, err)
		}
	}
}
