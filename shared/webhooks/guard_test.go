package webhooks_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

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

// Every IPv6 form that carries an IPv4 address, each carrying a loopback,
// a private, the metadata and a public address. Only the IPv4-mapped form
// is judged by the address inside (it is that IPv4 address); every other
// form is refused whatever it carries, naming the inner address's class
// when it has one, and the local stack's loopback allowance never lets one
// through.
func TestIPv4EmbeddingForms(t *testing.T) {
	inner := []struct {
		v4, class string
	}{
		{"127.0.0.1", "loopback"},
		{"10.0.0.1", "private"},
		{"169.254.169.254", "link-local"},
		{"8.8.8.8", ""},
	}
	for _, f := range []struct {
		form string
		// embed writes the IPv4 address (as a.b.c.d and its hex halves)
		// into the form.
		embed func(v4 netip.Addr) string
		// refusal is the class when the inner address is public; "" for
		// the mapped form, judged by the inner address alone. inner says
		// whether a non-public inner address names its own class.
		refusal string
		inner   bool
	}{
		{"IPv4-mapped ::ffff:0:0/96", func(a netip.Addr) string { return "::ffff:" + a.String() }, "", true},
		{"IPv4-translated ::ffff:0:0:0/96", func(a netip.Addr) string { return "::ffff:0:" + hexHalves(a) }, "IPv4-translated", true},
		{"IPv4-compatible ::/96", func(a netip.Addr) string { return "::" + hexHalves(a) }, "reserved", false},
		{"NAT64 64:ff9b::/96", func(a netip.Addr) string { return "64:ff9b::" + hexHalves(a) }, "NAT64", true},
		{"local-use NAT64 64:ff9b:1::/48", func(a netip.Addr) string { return "64:ff9b:1::" + hexHalves(a) }, "reserved", false},
		{"6to4 2002::/16", func(a netip.Addr) string { return "2002:" + hexHalves(a) + "::1" }, "6to4", true},
		{"Teredo 2001::/32", func(a netip.Addr) string { return "2001:0:" + hexHalves(a) + "::1" }, "reserved", false},
	} {
		for _, in := range inner {
			v4 := netip.MustParseAddr(in.v4)
			ip := netip.MustParseAddr(f.embed(v4))
			want := f.refusal
			if in.class != "" && (f.inner || f.refusal == "") {
				want = in.class
			}
			t.Run(f.form+" of "+in.v4, func(t *testing.T) {
				if got := webhooks.AddressClass(ip, false); got != want {
					t.Errorf("%s: class %q, want %q", ip, got, want)
				}
				local := want
				if f.refusal == "" && in.class == "loopback" {
					local = ""
				}
				if got := webhooks.AddressClass(ip, true); got != local {
					t.Errorf("%s with loopback allowed: class %q, want %q", ip, got, local)
				}
				_, err := webhooks.Guard{}.CheckURL(context.Background(), "https://["+ip.String()+"]/hook")
				if (err == nil) != (want == "") {
					t.Errorf("https://[%s]/hook: %v, want refused %v", ip, err, want != "")
				}
			})
		}
	}
	// The audit's address, as written.
	if _, err := (webhooks.Guard{AllowLocal: true}).CheckURL(context.Background(), "https://[::ffff:0:7f00:1]/"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("https://[::ffff:0:7f00:1]/: %v, want refused as loopback", err)
	}
	// And a delivery dialing it (a name that resolved to it after creation)
	// is refused on the address being dialed, before any packet is sent.
	_, err := (webhooks.Guard{AllowLocal: true}).Client(5*time.Second, nil).Get("https://[::ffff:0:7f00:1]:9/")
	if err == nil || !strings.Contains(err.Error(), "refused address") {
		t.Fatalf("dial of [::ffff:0:7f00:1]: %v, want a refused address", err)
	}
}

func hexHalves(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("%x:%x", uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3]))
}
