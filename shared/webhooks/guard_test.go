package webhooks_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/webhooks"
)

func TestAddressClasses(t *testing.T) {
	for _, c := range []struct {
		ip, class string
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"::1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"169.254.169.254", "link-local"}, // the cloud metadata service
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"100.64.0.1", "carrier-grade NAT"},
		{"100.127.255.254", "carrier-grade NAT"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "link-local"},
		{"64:ff9b::a00:1", "private"},      // NAT64 of 10.0.0.1
		{"2002:c0a8:101::1", "private"},    // 6to4 of 192.168.1.1
		{"255.255.255.255", "unspecified"}, // broadcast
		{"240.0.0.1", "reserved"},
		{"198.18.0.1", "reserved"},
		{"192.0.2.10", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.200", "documentation"},
		{"192.88.99.1", "reserved"},
		{"::a00:1", "reserved"},             // IPv4-compatible form of 10.0.0.1
		{"::808:808", "reserved"},           // and of 8.8.8.8: the form itself is refused
		{"100::1", "reserved"},              // discard-only
		{"2001:0:4136:e378::1", "reserved"}, // Teredo
		{"2001:db8::1", "documentation"},
		{"64:ff9b:1::a00:1", "reserved"}, // local-use NAT64
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"2606:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
	} {
		if got := webhooks.AddressClass(netip.MustParseAddr(c.ip), false); got != c.class {
			t.Errorf("%s: class %q, want %q", c.ip, got, c.class)
		}
	}
	// The local stack's flag lets loopback through, and nothing else.
	for ip, want := range map[string]string{"127.0.0.1": "", "::1": "", "::ffff:127.0.0.1": "", "10.0.0.1": "private", "169.254.169.254": "link-local"} {
		if got := webhooks.AddressClass(netip.MustParseAddr(ip), true); got != want {
			t.Errorf("allow loopback: %s: class %q, want %q", ip, got, want)
		}
	}
}

// fakeResolver answers every name from a table.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range f[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func TestCheckURL(t *testing.T) {
	res := fakeResolver{
		"hooks.example.com": {"93.184.216.34"},
		"internal.example":  {"10.0.0.7"},
		"mixed.example":     {"93.184.216.34", "192.168.0.10"},
		"metadata.example":  {"169.254.169.254"},
		"v6.example":        {"2606:4700::1111"},
		"ula.example":       {"fd00::1"},
		"mapped.example":    {"::ffff:127.0.0.1"},
		"cgnat.example":     {"100.64.1.1"},
		"localhost":         {"127.0.0.1"},
	}
	g := webhooks.Guard{Resolver: res}
	for _, c := range []struct {
		url  string
		want string // "" accepted, else a piece of the refusal
	}{
		{"https://hooks.example.com/envlease", ""},
		{"https://v6.example/x", ""},
		{"https://93.184.216.34/x", ""},
		{"http://hooks.example.com/envlease", "https"},
		{"ftp://hooks.example.com/", "https"},
		{"hooks.example.com/x", "absolute"},
		{"", "required"},
		{"https://user:pw@hooks.example.com/", "credentials"},
		{"https://127.0.0.1/x", "loopback"},
		{"https://[::1]:8443/x", "loopback"},
		{"https://localhost/x", "loopback"},
		{"https://10.0.0.1/x", "private"},
		{"https://192.168.1.20/x", "private"},
		{"https://169.254.169.254/latest/meta-data", "link-local"},
		{"https://[fe80::1]/x", "link-local"},
		{"https://0.0.0.0/x", "unspecified"},
		{"https://[::]/x", "unspecified"},
		{"https://224.0.0.5/x", "multicast"},
		{"https://100.64.0.1/x", "carrier-grade NAT"},
		{"https://[fd00::5]/x", "unique local"},
		{"https://[::ffff:10.0.0.1]/x", "private"},
		{"https://internal.example/x", "private"},
		{"https://mixed.example/x", "private"},
		{"https://metadata.example/x", "link-local"},
		{"https://ula.example/x", "unique local"},
		{"https://mapped.example/x", "loopback"},
		{"https://cgnat.example/x", "carrier-grade NAT"},
		{"https://nowhere.example/x", "does not resolve"},
	} {
		_, err := g.CheckURL(context.Background(), c.url)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.url, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: accepted, want a refusal (%s)", c.url, c.want)
		case c.want != "" && (domain.ErrorCode(err) != domain.CodeInvalid || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want 422 saying %q", c.url, err, c.want)
		}
	}
	local := webhooks.Guard{AllowLocal: true, Resolver: res}
	for _, u := range []string{"http://127.0.0.1:9000/hook", "https://localhost:8443/x", "https://[::1]/x"} {
		if _, err := local.CheckURL(context.Background(), u); err != nil {
			t.Errorf("allow local: %s refused: %v", u, err)
		}
	}
	if _, err := local.CheckURL(context.Background(), "https://10.0.0.1/x"); err == nil {
		t.Error("allow local: a private address was accepted")
	}
}
