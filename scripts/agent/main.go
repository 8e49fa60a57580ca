// Command agent is the reference node agent: it runs the environments of one
// pool as local processes (runtime "process"). See shared/agent and
// docs/nodes.md.
//
//	agent -api https://api.example -address 10.0.3.7 -workdir /var/lib/envlease \
//	      -credential-file /etc/envlease/node-credential
//
// The node credential (an admin issues it with POST /v1/nodes/credentials)
// is read from -credential-file, a file only the agent's user may read
// (mode 0600 or 0400; anything else is refused). Without it the agent reads
// $ENVLEASE_NODE_TOKEN, which processes of the agent's user can read in
// /proc/<pid>/environ. It is never taken from the arguments, which every
// user of the node sees in the process list.
//
// Run as root, the agent gives each environment a user of its own from
// -uid-range; otherwise it warns at start that environments are not
// confined.
//
// The agent serves tunnels to its environments' exports (envlease
// port-forward) on a WebSocket endpoint of its own, by default an ephemeral
// port of -address (-tunnel-addr chooses it, -tunnel-url overrides the URL
// registered when clients reach it through a proxy or NAT, -no-tunnel turns
// it off); clients must be able to reach it.
//
// What an environment's archives (its snapshot and its shares' files) may
// unpack to is bounded, for all of them together, by -archive-max-entries,
// -archive-max-bytes and -archive-max-ratio (unpacked to compressed bytes),
// and the names they hold by -archive-max-name (one name) and
// -archive-max-names (all of them), checked in every pass over an archive
// before anything of it is kept; an archive past a limit fails its
// environment and nothing of it is left.
// While the work dir's filesystem has less than -min-free-disk space or
// -min-free-inodes inodes free, the agent claims no environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/platform"
)

// tokenEnv is the environment variable the credential may come from.
const tokenEnv = "ENVLEASE_NODE_TOKEN"

// options are the command's flags, turned into an agent configuration.
type options struct {
	cfg      agent.Config
	logLevel string
}

// errUsage is a mistake in the arguments (exit status 2).
var errUsage = errors.New("usage")

// parse reads the arguments, and the credential from the file they name or
// from getenv.
func parse(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := fs.String("api", "http://127.0.0.1:8080", "base URL of the envlease API")
	credFile := fs.String("credential-file", "", "file holding the node credential, readable by the agent's user only (mode 0600); default: $"+tokenEnv)
	token := fs.String("token", "", "refused: a credential in the arguments is visible to every user in the process list (use -credential-file)")
	address := fs.String("address", "127.0.0.1", "host clients reach this node's environments at (the pool address); export targets are address:port")
	workDir := fs.String("workdir", "", "folder for the environments' folders (default: a temporary folder)")
	name := fs.String("name", "", "node name (default: the host name)")
	capacity := fs.Int("capacity", 8, "environments run at once (warm processes not counted)")
	grace := fs.Duration("grace", 10*time.Second, "time between SIGTERM and SIGKILL when an environment stops")
	readyTimeout := fs.Duration("ready-timeout", 2*time.Minute, "how long every export has to accept connections")
	noWarm := fs.Bool("no-warm", false, "do not keep warm processes")
	keep := fs.Bool("keep", false, "keep an environment's folder after it ends")
	uids := fs.String("uid-range", agent.DefaultUIDRange.String(), "user ids environments run as when the agent is root, FIRST-LAST; no other user of the node may have one")
	tunnelAddr := fs.String("tunnel-addr", "", "where the tunnel endpoint listens, host:port (default: an ephemeral port of -address)")
	tunnelURL := fs.String("tunnel-url", "", "the tunnel URL clients are told to dial, when it is not ws://<address>:<port>/tunnel (a proxy or NAT in front)")
	logMax := fs.String("log-max", "16Mi", "bytes of each environment's log the node keeps, such as 16Mi: the last ones are kept, followed live (envlease logs -f) and uploaded when the environment ends")
	noTunnel := fs.Bool("no-tunnel", false, "serve no tunnels (envlease port-forward cannot reach this node's environments)")
	sharedNet := fs.Bool("allow-shared-network", false, "as root, start even when the node cannot make namespaces: environments then share the node's network and process list")
	transport := fs.String("transport", agent.TransportAuto, "how to reach the service after registering: auto (the node protocol's WebSocket when the service offers one and it opens, else HTTP), websocket (insist, retrying), http (heartbeats and long-poll claims over HTTP)")
	socketURL := fs.String("socket-url", "", "the node protocol's WebSocket URL, when not the one registration gives (ws:// or wss://)")
	maxEntries := fs.Int64("archive-max-entries", archive.DefaultMaxEntries, "entries (files, folders, links) an environment's archives may unpack to, its snapshot and its shares together; 0: no limit")
	maxBytes := fs.String("archive-max-bytes", "8Gi", "bytes of files an environment's archives may unpack to, together, such as 8Gi or 500M; 0: no limit")
	maxRatio := fs.Float64("archive-max-ratio", archive.DefaultMaxRatio, "how many times their compressed size an environment's archives may unpack to, beyond the first 64 MiB; 0: no limit")
	maxName := fs.Int64("archive-max-name", archive.DefaultMaxNameBytes, "bytes of one name (or link target) in an environment's archives, checked before the name is kept; 0: no limit")
	maxNames := fs.String("archive-max-names", "64Mi", "bytes of all names an environment's archives hold, together; 0: no limit")
	minDisk := fs.String("min-free-disk", "1Gi", "claim no environment while the work dir's filesystem has less space free: a size such as 1Gi, or a percentage such as 5%; 0: no floor")
	minInodes := fs.String("min-free-inodes", "5%", "claim no environment while the work dir's filesystem has fewer inodes free: a count such as 10000, or a percentage; 0: no floor")
	diskDefault := fs.String("disk-default", "10Gi", "disk of an environment whose template's resources.disk names none: a filesystem of its own (as root), past which its writes fail with ENOSPC")
	diskMax := fs.String("disk-max", "100Gi", "largest resources.disk a template may ask of this node; an environment asking more fails, saying so")
	unboundedDisk := fs.Bool("allow-unbounded-disk", false, "as root, start even when environments cannot have disks of their own (no mkfs.ext4 or loop devices): they then write to the node's disk unbounded")
	runc := fs.String("runc", "", "the runc binary of the container runtime (default: the project's pinned runc when installed with go run ./shared/devstack/cmd/runc, else runc on PATH; container offered when found and it has the fixes of the known container escapes); none: offer no container runtime")
	imageCache := fs.String("image-cache", "", "folder of the unpacked images containers run from (default: <workdir>/images)")
	imageCacheMax := fs.String("image-cache-max", "20Gi", "bytes the image cache may hold, such as 20Gi; past it the least recently used images no environment runs are removed")
	buildCache := fs.String("build-cache", "", "folder of the build caches of templates with buildCache, one per organization and template (default: <workdir>/caches)")
	buildCacheMax := fs.String("build-cache-max", "10Gi", "bytes the build caches may hold together, such as 10Gi; past it the least recently used caches no environment holds are removed")
	registryCreds := fs.String("registry-credentials", "", "Docker-style config file (auths, credHelpers) of the registry credentials images are pulled with; never taken from a template")
	idBase := fs.Uint("container-id-base", agent.DefaultContainerIDBase, "first id of the node that a container's user namespace maps its ids 0-65535 to (root in a container is this unprivileged id); no other user of the node may have one of them")
	logLevel := fs.String("log", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return options{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *token != "" {
		return options{}, fmt.Errorf("%w: -token is not accepted: a credential in the arguments is visible to every user of the node in the process list; put it in a file only the agent's user can read and pass -credential-file", errUsage)
	}
	r, err := agent.ParseUIDRange(*uids)
	if err != nil {
		return options{}, fmt.Errorf("%w: -uid-range: %v", errUsage, err)
	}
	limits, err := archiveLimits(*maxEntries, *maxBytes, *maxRatio, *maxName, *maxNames)
	if err != nil {
		return options{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	disk, err := agent.ParseThreshold(*minDisk, true)
	if err != nil {
		return options{}, fmt.Errorf("%w: -min-free-disk: %v", errUsage, err)
	}
	inodes, err := agent.ParseThreshold(*minInodes, false)
	if err != nil {
		return options{}, fmt.Errorf("%w: -min-free-inodes: %v", errUsage, err)
	}
	logBytes, err := agent.ParseSize(*logMax)
	if err != nil || logBytes < 1<<10 || logBytes > 32<<20 {
		return options{}, fmt.Errorf("%w: -log-max %q: a size from 1Ki to 32Mi", errUsage, *logMax)
	}
	diskDef, err := agent.ParseSize(*diskDefault)
	if err != nil {
		return options{}, fmt.Errorf("%w: -disk-default: %v", errUsage, err)
	}
	diskLimit, err := agent.ParseSize(*diskMax)
	if err != nil || diskLimit < diskDef {
		return options{}, fmt.Errorf("%w: -disk-max %q: a size no smaller than -disk-default", errUsage, *diskMax)
	}
	cacheMax, err := agent.ParseSize(*imageCacheMax)
	if err != nil {
		return options{}, fmt.Errorf("%w: -image-cache-max: %v", errUsage, err)
	}
	buildMax, err := agent.ParseSize(*buildCacheMax)
	if err != nil {
		return options{}, fmt.Errorf("%w: -build-cache-max: %v", errUsage, err)
	}
	if *idBase < 1000 || *idBase > 1<<32-1-65536 {
		return options{}, fmt.Errorf("%w: -container-id-base %d: an id from 1000 that leaves room for 65536 ids", errUsage, *idBase)
	}
	o := options{logLevel: *logLevel, cfg: agent.Config{
		API: *api, Address: *address, WorkDir: *workDir, Name: *name, Capacity: *capacity,
		Grace: *grace, ReadyTimeout: *readyTimeout, NoWarm: *noWarm, KeepRoots: *keep, UIDs: r,
		TunnelAddr: *tunnelAddr, TunnelURL: *tunnelURL, NoTunnel: *noTunnel, AllowSharedNetwork: *sharedNet, LogMax: int64(logBytes),
		Transport: *transport, SocketURL: *socketURL,
		Archives: limits, MinFreeDisk: disk, MinFreeInodes: inodes,
		DiskDefault: uint64(diskDef), DiskMax: uint64(diskLimit), AllowUnboundedDisk: *unboundedDisk,
		Runc: *runc, ImageCacheDir: *imageCache, ImageCacheBytes: int64(cacheMax),
		RegistryCredentials: *registryCreds, ContainerIDBase: uint32(*idBase),
		BuildCacheDir: *buildCache, BuildCacheBytes: int64(buildMax),
	}}
	switch {
	case *credFile != "":
		if o.cfg.Token, err = agent.ReadCredentialFile(*credFile); err != nil {
			return options{}, err
		}
	case getenv(tokenEnv) != "":
		o.cfg.Token = getenv(tokenEnv)
	default:
		return options{}, fmt.Errorf("%w: a node credential is needed: -credential-file FILE (mode 0600), or $%s", errUsage, tokenEnv)
	}
	return o, nil
}

// archiveLimits turns the -archive-* flags into limits; a flag's 0 (no
// limit) is the configuration's negative.
func archiveLimits(entries int64, bytes string, ratio float64, name int64, names string) (archive.Limits, error) {
	var l archive.Limits
	switch {
	case entries < 0:
		return l, fmt.Errorf("-archive-max-entries %d: a count, or 0 for no limit", entries)
	case entries == 0:
		l.MaxEntries = -1
	default:
		l.MaxEntries = entries
	}
	if bytes == "0" {
		l.MaxBytes = -1
	} else {
		n, err := agent.ParseSize(bytes)
		if err != nil {
			return l, fmt.Errorf("-archive-max-bytes: %v", err)
		}
		l.MaxBytes = n
	}
	switch {
	case ratio < 0 || ratio != ratio:
		return l, fmt.Errorf("-archive-max-ratio %g: a factor such as 100, or 0 for no limit", ratio)
	case ratio == 0:
		l.MaxRatio = -1
	default:
		l.MaxRatio = ratio
	}
	switch {
	case name < 0:
		return l, fmt.Errorf("-archive-max-name %d: a length in bytes, or 0 for no limit", name)
	case name == 0:
		l.MaxNameBytes = -1
	default:
		l.MaxNameBytes = name
	}
	if names == "0" {
		l.MaxNamesBytes = -1
	} else {
		n, err := agent.ParseSize(names)
		if err != nil {
			return l, fmt.Errorf("-archive-max-names: %v", err)
		}
		l.MaxNamesBytes = n
	}
	return l, nil
}

func main() {
	o, err := parse(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	// Nothing the agent starts inherits its environment, but drop the
	// credential from it all the same.
	_ = os.Unsetenv(tokenEnv)
	o.cfg.Log = platform.Logger(os.Stderr, o.logLevel)
	if o.cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "envlease-agent-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		o.cfg.WorkDir = dir
	}
	a, err := agent.New(o.cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}
