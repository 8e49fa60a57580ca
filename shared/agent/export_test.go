package agent

import (
	"io"
	"net/netip"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/agent/confine"
)

// Unpack exposes unpack to the external tests.
func Unpack(r io.Reader, root string) (int, error) { return unpack(r, root, archive.UnpackOptions{}) }

// AsNotRoot makes an agent take the path of a node where it is not root.
func AsNotRoot(c *Config) { c.assumeNotRoot = true }

// WithoutCgroups makes an agent take the path of a node without a cgroup
// tree it may write.
func WithoutCgroups(c *Config) { c.noCgroups = true }

// WithoutNamespaces makes an agent take the path of a root agent on a node
// that cannot make namespaces, started with AllowSharedNetwork.
func WithoutNamespaces(c *Config) { c.noNamespaces, c.AllowSharedNetwork = true, true }

// CannotMakeNamespaces makes an agent take the path of a root agent on a
// node that cannot make namespaces, as configured.
func CannotMakeNamespaces(c *Config) { c.noNamespaces = true }

// CgroupsWritable says whether this node lets the agent make cgroups.
func CgroupsWritable() bool {
	_, err := confine.CgroupParent()
	return err == nil
}

// NamespacesWork says why this node cannot run environments in namespaces
// of their own, or nil when it can.
func NamespacesWork() error { return confine.ProbeNamespaces() }

// AllowEgressTo lets environments' egress proxies reach these addresses,
// which they would refuse: the tests' "outside" servers on the loopback.
func AllowEgressTo(addrs ...netip.AddrPort) func(*Config) {
	return func(c *Config) { c.egressAllow = append(c.egressAllow, addrs...) }
}

// KeptReader exposes keptReader to the external tests.
var KeptReader = keptReader

// WriteToken exposes writeToken to the external tests.
var WriteToken = writeToken

// IdentityPaths exposes identityPaths to the external tests.
var IdentityPaths = identityPaths

// BeforeSocketClaim makes an agent call f before it makes up each claim on
// the node protocol, with how many offers are queued then.
func BeforeSocketClaim(f func(queued func() int)) func(*Config) {
	return func(c *Config) { c.beforeSocketClaim = f }
}

// QueuedOffers bounds an agent's queue of offers on the node protocol.
func QueuedOffers(n int) func(*Config) {
	return func(c *Config) { c.queuedOffers = n }
}

// OfferDropped reports whether an offer found the agent's queue full since
// its last claim.
func (a *Agent) OfferDropped() bool {
	sock := a.sock.Load()
	return sock != nil && sock.dropped.Load()
}
