package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	for _, c := range []struct {
		in, err string
	}{
		{in: "github.com"}, {in: "*.pypi.org:443"}, {in: "203.0.113.7"}, {in: "203.0.113.0/24:22"},
		{in: "[2001:db8::1]:443"}, {in: "2001:db8::/32"}, {in: "*:8000-8100"}, {in: "Example.COM."},
		{in: "", err: "empty"}, {in: "*.com", err: "two labels"}, {in: "a b", err: "not a domain"},
		{in: "x.com:0", err: "port"}, {in: "x.com:90-80", err: "ends before"}, {in: "10.0.0.1/8", err: "bits beyond"},
		{in: "ex*.com", err: "not a domain"}, {in: "[::1", err: "without"},
	} {
		_, err := ParseEntry(c.in)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ParseEntry(%q) = %v, want error containing %q", c.in, err, c.err)
		}
	}
}

func TestDecide(t *testing.T) {
	rules := MustCompile(ModeRules, Rules{
		Allow: []string{"github.com", "*.pypi.org:443", "203.0.113.0/24", "*:53"},
		Deny:  []string{"evil.pypi.org", "203.0.113.66"},
	})
	open := MustCompile(ModeOpen, Rules{Deny: []string{"*:25"}})
	a := netip.MustParseAddr
	for _, c := range []struct {
		name  string
		p     Layers
		t     Target
		allow bool
		rule  string
	}{
		{"by name", Layers{rules}, Target{a("198.51.100.1"), 443, []string{"github.com"}}, true, "allow github.com"},
		{"subdomain not apex", Layers{rules}, Target{a("198.51.100.1"), 443, []string{"pypi.org"}}, false, "no allow entry"},
		{"wildcard", Layers{rules}, Target{a("198.51.100.1"), 443, []string{"files.pypi.org"}}, true, "allow *.pypi.org:443"},
		{"wildcard wrong port", Layers{rules}, Target{a("198.51.100.1"), 80, []string{"files.pypi.org"}}, false, "no allow entry"},
		{"deny wins", Layers{rules}, Target{a("198.51.100.1"), 443, []string{"evil.pypi.org"}}, false, "deny evil.pypi.org"},
		{"cidr", Layers{rules}, Target{a("203.0.113.9"), 9, nil}, true, "allow 203.0.113.0/24"},
		{"deny address in allowed cidr", Layers{rules}, Target{a("203.0.113.66"), 9, nil}, false, "deny 203.0.113.66"},
		{"any address port", Layers{rules}, Target{a("192.0.2.1"), 53, nil}, true, "allow *:53"},
		{"open", Layers{open}, Target{a("192.0.2.1"), 443, nil}, true, "open"},
		{"open deny port", Layers{open}, Target{a("192.0.2.1"), 25, nil}, false, "deny *:25"},
		{"narrowed", Layers{open, rules}, Target{a("192.0.2.1"), 443, nil}, false, "no allow entry"},
		{"never widened", Layers{MustCompile(ModeNone, Rules{}), open}, Target{a("192.0.2.1"), 443, nil}, false, "mode none"},
	} {
		d := c.p.Decide(c.t)
		if d.Allow != c.allow || d.Rule != c.rule {
			t.Errorf("%s: %+v, want allow=%v rule %q", c.name, d, c.allow, c.rule)
		}
	}
	if d := (Layers{MustCompile(ModeRules, Rules{Allow: []string{"github.com"}})}).DecideName("example.com"); d.Allow {
		t.Errorf("a name no entry could allow is answered: %+v", d)
	}
	if d := (Layers{rules}).DecideName("example.com"); !d.Allow {
		t.Errorf("with an address entry every name may resolve: %+v", d)
	}
}

func TestCompileBounds(t *testing.T) {
	many := make([]string, MaxEntries+1)
	for i := range many {
		many[i] = "a.example"
	}
	if _, err := Compile(ModeRules, Rules{Allow: many}); err == nil {
		t.Error("more than MaxEntries entries are accepted")
	}
	if _, err := Compile(ModeOpen, Rules{Allow: []string{"x.com"}}); err == nil {
		t.Error("allow entries in open mode are accepted")
	}
	if _, err := Compile("egress", Rules{}); err == nil {
		t.Error("an unknown mode is accepted")
	}
}
