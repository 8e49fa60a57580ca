package confine

import (
	"testing"

	"github.com/envlease/envlease/shared/domain"
	"github.com/vishvananda/netns"
)

// Which way a template's environments reach out: egress always through
// the proxy; open through the boundary where the node makes one, else the
// proxy; rules only through a boundary (an error where there is none);
// nothing without namespaces of their own.
func TestProxiedAndBoundary(t *testing.T) {
	boundary := func(netns.NsHandle, domain.Template, string) (Egress, error) { return nil, nil }
	for _, c := range []struct {
		network      string
		namespaces   bool
		hasBoundary  bool
		proxied      bool
		boundaryFail bool
	}{
		{domain.NetworkEgress, true, true, true, false},
		{domain.NetworkOpen, true, true, false, false},
		{domain.NetworkOpen, true, false, true, true},
		{domain.NetworkRules, true, false, false, true},
		{domain.NetworkRules, true, true, false, false},
		{domain.NetworkEgress, false, false, false, true},
		{domain.NetworkNone, true, true, false, false},
	} {
		n := &Node{Namespaces: c.namespaces}
		if c.hasBoundary {
			n.Boundary = boundary
		}
		tpl := domain.Template{Name: "t", Network: c.network}
		if got := n.Proxied(tpl); got != c.proxied {
			t.Errorf("%s (namespaces %v, boundary %v): proxied %v, want %v", c.network, c.namespaces, c.hasBoundary, got, c.proxied)
		}
		if _, err := n.OpenBoundary(netns.None(), tpl, "x"); (err != nil) != c.boundaryFail {
			t.Errorf("%s (boundary %v): OpenBoundary err %v", c.network, c.hasBoundary, err)
		}
	}
}
