package agent

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/agent/netstack"
)

// Version is what the agent calls itself when it registers.
const Version = "envlease-agent/1"

// Config configures an agent.
type Config struct {
	// API is the service's base URL; Token a node credential of the pool.
	API, Token string
	// Address is the host clients reach this node's environments at; the
	// export targets are Address:port. In namespaces of their own (as
	// root) nothing of an environment listens there: a target names an
	// export, which the agent's tunnel reaches inside the environment's
	// network namespace.
	Address string
	// WorkDir holds a folder per environment (envs/<id>) and per warm process.
	WorkDir string
	// Name is the node's name (default: the host name); Capacity how many
	// environments it runs at once (default 8). Warm processes are not counted.
	Name     string
	Capacity int
	// Grace is how long a stopped process has between SIGTERM and SIGKILL
	// (default 10s).
	Grace time.Duration
	// ReadyTimeout bounds the wait for every export to accept connections
	// (default 2m).
	ReadyTimeout time.Duration
	// Heartbeat overrides the interval the server asks for, when set.
	Heartbeat time.Duration
	// ClaimWait is how long one claim long-polls (default: the server's).
	ClaimWait time.Duration
	// Transport is how the node speaks to the service after registering:
	// TransportAuto (default: the node protocol's WebSocket when the
	// service names one and it opens, else HTTP), TransportWebSocket or
	// TransportHTTP. SocketURL overrides the WebSocket's URL the
	// registration gives.
	Transport, SocketURL string
	// SampleEvery is how often the agent samples each environment's use
	// (metrics and CPU activity; default DefaultSampleEvery).
	SampleEvery time.Duration
	// Now is the agent's clock for activity and metrics (default
	// time.Now); tests set a fake one.
	Now func() time.Time
	// NoWarm turns warm environments off.
	NoWarm bool
	// Runc is the runc binary the container runtime drives (default: runc
	// on PATH); RuntimeNone ("none") offers no container runtime. Without
	// runc, or when the agent is not root with namespaces, the node offers
	// process alone.
	Runc string
	// ImageCacheDir holds the unpacked images (default <WorkDir>/images),
	// ImageCacheBytes bounds them (default image.DefaultCacheBytes), least
	// recently used evicted first.
	ImageCacheDir   string
	ImageCacheBytes int64
	// BuildCacheDir holds the build caches of templates with buildCache
	// (default <WorkDir>/caches), one per organization and template;
	// BuildCacheBytes bounds them together (default
	// buildcache.DefaultMaxBytes), the least recently used of those no
	// environment holds evicted first.
	BuildCacheDir   string
	BuildCacheBytes int64
	// RegistryCredentials is a Docker-style config file of registry
	// credentials for pulling images; never taken from a template.
	RegistryCredentials string
	// ContainerIDBase is the first id of the node a container's user
	// namespace maps its 65536 ids to (default DefaultContainerIDBase);
	// ContainerNoUserNS runs containers without a user namespace (root in
	// the container is then the node's root, less capabilities).
	ContainerIDBase   uint32
	ContainerNoUserNS bool
	// AllowSharedNetwork lets an agent that runs as root start although the
	// node cannot make namespaces (a container without the privilege, a
	// systemd unit with RestrictNamespaces): its environments then share the
	// node's network and process list. Without it such an agent refuses to
	// start, rather than run every tenant's environment unconfined with
	// only a warning.
	AllowSharedNetwork bool
	// DiskDefault is the disk of an environment whose template's
	// resources.disk names none, DiskMax the largest one may name (defaults
	// confine.DefaultDisk, 10 GiB, and confine.DefaultMaxDisk, 100 GiB).
	// As root each environment writes to a filesystem of its own of that
	// size (docs/nodes.md, "Disk"); AllowUnboundedDisk lets the agent start
	// where it cannot make them (no mkfs.ext4, no loop devices), with
	// environments then writing to the node's disk unbounded.
	DiskDefault, DiskMax uint64
	AllowUnboundedDisk   bool
	// PreparedBoxes is how many environments' boxes (a user id, the
	// folder, a disk of DiskDefault, the cgroup) a node running as root
	// keeps made ahead of claims, so a cold start takes one instead of
	// making it (default confine.DefaultPreparedBoxes; -1 for none).
	PreparedBoxes int
	// MaxExecs bounds the commands and shells (envlease exec, shell) one
	// environment runs at once (default DefaultMaxExecs).
	MaxExecs int
	// KeepRoots leaves an environment's folder after it ends, for debugging.
	KeepRoots bool
	// TunnelAddr is where the tunnel endpoint listens (default: an
	// ephemeral port of Address); TunnelURL is the URL clients are told to
	// dial (default ws://Address:<that port>/tunnel), for a node behind a
	// proxy or NAT; NoTunnel serves no tunnels (tickets are then refused by
	// the API).
	TunnelAddr, TunnelURL string
	NoTunnel              bool
	// LogMax bounds each environment's log on the node: the last LogMax
	// bytes are kept (default envlog.DefaultMax); logs.go.
	LogMax int64
	// UIDs is the range of user ids environments run as when the agent runs
	// as root (default DefaultUIDRange). Every agent of the node may share
	// one range; nothing else may use it.
	UIDs UIDRange
	// Archives bounds what each environment's archives, its snapshot and
	// its shares' together, may unpack to (zero fields take the defaults).
	Archives archive.Limits
	// MinFreeDisk and MinFreeInodes are the floors of free space and free
	// inodes in the work dir's filesystem below which the agent claims no
	// environment, fails one it claimed, and stops an unpacking (defaults
	// DefaultMinFreeDisk and DefaultMinFreeInodes).
	MinFreeDisk, MinFreeInodes Threshold
	// Statfs reads the work dir's filesystem (default: statfs(2) on Linux;
	// elsewhere nothing, and the floors are not judged). Tests replace it to
	// simulate a full disk.
	Statfs Statfs
	HTTP   *http.Client
	Log    *slog.Logger

	// assumeNotRoot, noCgroups and noNamespaces let tests take the paths of
	// a node where the agent is not root, has no cgroup tree to write, or
	// cannot make namespaces.
	assumeNotRoot, noCgroups, noNamespaces bool
	// egressAllow lets egress proxies reach these addresses whatever they
	// are: tests' "outside" servers, which listen on the node's loopback.
	egressAllow []netip.AddrPort
	// boundaryResolver and boundaryDial stand, in tests, for the node's
	// resolver and dialer behind network boundaries (netstack.Config).
	boundaryResolver netstack.Resolver
	boundaryDial     func(ctx context.Context, network, addr string) (net.Conn, error)
	// boundaryRoots, in tests, verify the servers a boundary adds secrets
	// for (default: the system's roots).
	boundaryRoots *x509.CertPool
	// beforeSocketClaim, in tests, runs before each claim on the node
	// protocol is made up, given how many offers are queued then: tests
	// hold a claim until offers have arrived.
	beforeSocketClaim func(queued func() int)
	// queuedOffers, in tests, bounds the node protocol's queue of offers
	// (0: maxQueuedOffers).
	queuedOffers int
}
