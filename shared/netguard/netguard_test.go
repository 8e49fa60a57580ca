package netguard

import (
	"net/netip"
	"testing"
)

// The classes the webhook guard's tests cover in depth, here only as the
// rules the agent's egress proxy relies on too.
func TestClass(t *testing.T) {
	for _, c := range []struct {
		ip            string
		allowLoopback bool
		want          string
	}{
		{"93.184.215.14", false, ""},
		{"2606:4700::1111", false, ""},
		{"127.0.0.1", false, "loopback"},
		{"127.0.0.1", true, ""},
		{"::1", false, "loopback"},
		{"10.1.2.3", false, "private"},
		{"172.16.0.1", false, "private"},
		{"192.168.1.1", false, "private"},
		{"169.254.169.254", false, "link-local"},
		{"fd00:ec2::254", false, "unique local"},
		{"100.64.0.1", false, "carrier-grade NAT"},
		{"0.0.0.0", false, "unspecified"},
		{"::ffff:10.0.0.1", false, "private"},
		{"::ffff:0:7f00:1", true, "loopback"}, // an embedding form never gets the loopback exception
		{"64:ff9b::a9fe:a9fe", false, "link-local"},
	} {
		if got := Class(netip.MustParseAddr(c.ip), c.allowLoopback); got != c.want {
			t.Errorf("Class(%s, %v) = %q, want %q", c.ip, c.allowLoopback, got, c.want)
		}
	}
}
