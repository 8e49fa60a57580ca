//go:build linux

package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/envlease/envlease/shared/agent/buildcache"
	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/ctrinit"
	"github.com/envlease/envlease/shared/agent/image"
	"github.com/envlease/envlease/shared/agent/netstack"
	"github.com/envlease/envlease/shared/agent/runc"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/bytesize"
	"github.com/envlease/envlease/shared/domain"
)

// containerIDs is how many ids a container's user namespace maps.
const containerIDs = 65536

// Runtime is the runtime "container" behind the runtimes seam: the
// image from a registry (with the node's credentials) or from an artifact
// the claim links to, unpacked once into the node's image cache; a
// container of its own for each environment (package container, the runc
// driver: an overlay over the cached image, runc create and start), in a
// user namespace and a network namespace of its own that the agent holds,
// so readiness checks, tunnels and the egress proxy reach it as they reach
// a process in namespaces of its own.
type Runtime struct {
	cfg    Config
	rc     *runc.Runtime
	cache  *image.Cache
	puller image.Puller
	userns *runc.IDMap
	// init is PID 1 of every container (package ctrinit).
	init *ctrinit.Binary
	// archives maps an image archive's SHA-256 to the config digest of its
	// image, so a cached artifact image is not downloaded again.
	mu       sync.Mutex
	archives map[string]string
}

// New makes the container runtime, or says why the node cannot offer it.
func New(cfg Config) (*Runtime, error) {
	if cfg.Node.Users == nil || !cfg.Node.Namespaces {
		return nil, fmt.Errorf("containers need the agent to run as root with namespaces (%v)", cfg.NoNamespaces)
	}
	rc, err := runc.New(runc.Options{Runc: cfg.Runc, Dir: filepath.Join(cfg.WorkDir, "containers"), Disks: cfg.Node.Disks, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	r := &Runtime{cfg: cfg, rc: rc, archives: map[string]string{}}
	shift := 0
	if !cfg.NoUserNS {
		base := cfg.IDBase
		if base == 0 {
			base = DefaultIDBase
		}
		if uint64(base) <= uint64(cfg.UIDs.Last) && uint64(cfg.UIDs.First) < uint64(base)+containerIDs {
			return nil, fmt.Errorf("the containers' ids %d-%d overlap the environments' user ids %s", base, uint64(base)+containerIDs-1, cfg.UIDs)
		}
		r.userns = &runc.IDMap{HostID: base, Size: containerIDs}
		shift = int(base)
	}
	if r.init, err = ctrinit.Install(filepath.Join(cfg.WorkDir, "init")); err != nil {
		return nil, err
	}
	kc, err := image.KeychainFromFile(cfg.RegistryCredentials)
	if err != nil {
		return nil, err
	}
	r.puller = image.Puller{Keychain: kc}
	dir := cfg.ImageCacheDir
	if dir == "" {
		dir = filepath.Join(cfg.WorkDir, "images")
	}
	r.cache, err = image.OpenCache(dir, image.CacheOptions{MaxBytes: cfg.ImageCacheBytes, Log: cfg.Log,
		Apply: image.ApplyOptions{Owners: true, IDShift: shift, IDs: containerIDs, Devices: true}})
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	return r, nil
}

func (r *Runtime) Name() string { return domain.RuntimeContainer }

// Describe says what the runtime runs, for the agent's start.
func (r *Runtime) Describe() []any {
	v, _ := r.rc.Version(context.Background())
	attrs := []any{"runc", v, "imageCache", r.cache.Bytes()}
	if r.userns != nil {
		attrs = append(attrs, "userns", fmt.Sprintf("0-%d -> %d-%d", r.userns.Size-1, r.userns.HostID, r.userns.HostID+r.userns.Size-1))
	}
	return attrs
}

func (r *Runtime) Recover(ctx context.Context) (int, error) {
	gone, err := r.rc.Recover(ctx)
	if len(gone) > 0 {
		r.cfg.Log.Warn("removed the containers an earlier run of the agent left", "containers", len(gone))
	}
	return len(gone), err
}

// image gives the root filesystem of e's image from the cache, which
// pulls or reads it first unless it holds it.
func (r *Runtime) image(ctx context.Context, e runtimes.Env) (*image.Rootfs, error) {
	if art := e.ImageArtifact; art != nil {
		r.mu.Lock()
		digest := r.archives[art.SHA256]
		r.mu.Unlock()
		if digest != "" && art.SHA256 != "" {
			if rf := r.cache.Lookup(digest); rf != nil {
				return rf, nil
			}
		}
		path, done, err := art.Fetch(ctx)
		if err != nil {
			return nil, err
		}
		defer done()
		scratch, err := os.MkdirTemp(r.cfg.WorkDir, "image-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(scratch)
		img, err := image.OpenArchive(path, scratch, nil)
		if err != nil {
			return nil, err
		}
		rf, err := r.cache.Get(ctx, img)
		if err == nil && art.SHA256 != "" {
			r.mu.Lock()
			r.archives[art.SHA256] = rf.Digest
			r.mu.Unlock()
		}
		return rf, err
	}
	if e.Template.Image == nil || e.Template.Image.Ref == "" {
		return nil, errors.New("a container template needs an image (image.ref, or image.artifact with a link in the claim)")
	}
	img, err := r.puller.Pull(ctx, e.Template.Image.Ref)
	if err != nil {
		return nil, err
	}
	return r.cache.Get(ctx, img)
}

// Prepare gets the image, makes the network namespace (and the egress
// proxy in it), and creates the container: its process waits for Start,
// while the agent puts shares and a snapshot into its root filesystem.
func (r *Runtime) Prepare(ctx context.Context, e runtimes.Env) (_ runtimes.Handle, err error) {
	t := e.TemplateWithPaths("/")
	rf, err := r.image(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	h := &handle{r: r, id: e.ID, rf: rf, out: runtimes.Output(e), tail: runtimes.NewTail(16 << 10)}
	if rf.Pulled {
		runtimes.Note(h.out, "image pulled: %s", rf.Digest)
	} else {
		runtimes.Note(h.out, "image from the node's cache: %s", rf.Digest)
	}
	defer func() {
		if err != nil {
			h.Remove()
		}
	}()
	var mem int64
	if t.Resources.Memory != "" {
		n, err := bytesize.Parse(t.Resources.Memory)
		if err != nil {
			return nil, fmt.Errorf("resources.memory %q: %v", t.Resources.Memory, err)
		}
		mem = int64(n)
	}
	cfg, err := runc.FromTemplate(e.ID, t, rf.Config, mem)
	if err != nil {
		return nil, err
	}
	services := make([]string, 0, len(t.Exports))
	for s := range t.Exports {
		services = append(services, s)
	}
	sort.Strings(services)
	h.ports = runtimes.NamespacePorts(t, services)
	var extra []string
	for i, s := range services {
		if i == 0 {
			extra = append(extra, "PORT="+strconv.Itoa(h.ports[s]))
		}
		extra = append(extra, runtimes.PortEnv(s)+"="+strconv.Itoa(h.ports[s]))
	}
	cfg.Env = append(cfg.Env, extra...)
	if len(t.Secrets) > 0 && t.Transparent() {
		// The roots with the environment's CA, written once the
		// boundary made it (below); the template's values win.
		cfg.Env = withDefaults(cfg.Env, runtimes.TrustEnv(runtimes.ContainerBundle))
	}
	egress := 0
	if r.cfg.Node.Proxied(t) {
		egress = confine.EgressPortFor(h.ports)
		cfg.Env = withDefaults(cfg.Env, confine.EgressEnv(egress))
	}
	// All it writes lands on a disk of its own (its upper folder there),
	// /tmp included: the root filesystem's own, fresh for each container
	// and writable when the root is read-only. (A tmpfs would be memory,
	// bounded by no disk.)
	if d := r.cfg.Node.Disks; d != nil {
		size, err := d.Size(t.Resources.Disk)
		if err != nil {
			return nil, err
		}
		cfg.Disk = &size
	}
	if cfg.ReadOnly && !slices.ContainsFunc(cfg.Writable, func(w string) bool { return path.Clean(w) == "/tmp" }) {
		cfg.Writable = append(cfg.Writable, "/tmp")
	}
	cfg.Stdout, cfg.Stderr = h.out, io.MultiWriter(h.tail, h.out)
	cfg.UserNS = r.userns
	h.home = strings.TrimPrefix(cfg.Cwd, "/")
	// The files endpoint changes only what the container may write (its
	// root is read-only but for these, bound from the root itself).
	h.writable = []string{}
	if cfg.ReadOnly {
		if h.writable, err = runc.WritablePaths(cfg.Writable); err != nil {
			return nil, err
		}
	} else {
		h.writable = nil
	}
	h.uid, h.gid = int(cfg.UID), int(cfg.GID)
	if r.userns != nil {
		h.uid += int(r.userns.HostID)
		h.gid += int(r.userns.HostID)
	}
	if t.BuildCache && r.cfg.BuildCache != nil {
		if h.cache, err = r.cfg.BuildCache.Checkout(e.Org, t.Name, buildcache.Owner{UID: h.uid, GID: h.gid}); err != nil {
			return nil, err
		}
		cfg.Mounts = append(cfg.Mounts, runc.Mount{Source: h.cache.Path(), Destination: CachePath})
		cfg.Env = append(cfg.Env, runtimes.CacheEnv+"="+CachePath)
	}
	// The command runs under an init of the agent's as PID 1, which
	// forwards signals to it and reaps orphans.
	for _, m := range r.init.Mounts() {
		cfg.Mounts = append(cfg.Mounts, runc.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: true})
	}
	cfg.Args = r.init.Wrap(cfg.Args)
	ctr, err := r.rc.Create(ctx, rf.Dir, cfg)
	if err != nil {
		return nil, err
	}
	h.ctr = ctr
	// The container's network namespace is runc's, made with the
	// container and owned by its user namespace (so that it may mount its
	// own /sys); the agent holds it from the created process, before the
	// command starts, and reaches exports and serves the egress proxy in
	// it as for a process.
	nsh, err := netns.GetFromPid(ctr.Pid)
	if err != nil {
		return nil, fmt.Errorf("open the container's network namespace: %w", err)
	}
	h.net = confine.NewNet(nsh, nil, nil)
	if egress > 0 {
		ln, err := confine.ListenIn(nsh, egress)
		if err != nil {
			return nil, fmt.Errorf("open the egress proxy in the environment's network namespace: %w", err)
		}
		h.net = confine.NewNet(nsh, nil, confine.ServeEgress(ln, r.cfg.Node.Guard, r.cfg.Log.With("container", e.ID, "egressPort", egress)))
	} else if t.Transparent() {
		// The boundary is in place before the command starts.
		b, err := r.cfg.Node.OpenBoundary(nsh, t, e.ID)
		if err != nil {
			return nil, err
		}
		h.net = confine.NewNet(nsh, nil, b)
		// The image's resolv.conf (if any) names resolvers the container
		// cannot reach; the boundary answers its DNS.
		if err := netstack.WriteResolvConf(filepath.Join(ctr.Dir, "rootfs")); err != nil {
			return nil, fmt.Errorf("write the container's resolv.conf: %w", err)
		}
		if err := runtimes.WriteContainerBundle(filepath.Join(ctr.Dir, "rootfs"), runtimes.CABundleFor(b)); err != nil {
			return nil, fmt.Errorf("write the container's CA bundle: %w", err)
		}
	}
	return h, nil
}

// withDefaults adds each of defs to env unless env names it already (the
// template's and the image's values win).
func withDefaults(env, defs []string) []string {
	have := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		have[k] = true
	}
	for _, kv := range defs {
		if k, _, _ := strings.Cut(kv, "="); !have[k] {
			env = append(env, kv)
		}
	}
	return env
}

// handle is one environment of the container runtime.
type handle struct {
	r        *Runtime
	id       string
	rf       *image.Rootfs
	ctr      *runc.Container
	net      *confine.Net
	ports    map[string]int
	home     string
	writable []string
	uid, gid int
	// cache is the environment's build cache, nil without.
	cache *buildcache.Lease
	once  sync.Once
	// out gets what the container writes to stdout and stderr as it comes
	// (the driver copies it from the container's pipes); tail keeps the
	// last of its stderr, which Err quotes.
	out  io.Writer
	tail *runtimes.Tail
}

func (h *handle) Files() runtimes.Files {
	f := runtimes.Files{Root: filepath.Join(h.ctr.Dir, "rootfs"), Home: h.home, Owner: &runtimes.Owner{UID: h.uid, GID: h.gid},
		Reserved: []string{strings.TrimPrefix(ctrinit.Dir, "/"), runtimes.IdentityReserved}, Writable: h.writable, InRoot: true}
	if h.cache != nil {
		f.Mounted = []string{CachePath}
	}
	return f
}

func (h *handle) Start(ctx context.Context) error {
	return h.r.rc.Start(ctx, h.id)
}

func (h *handle) Ports() map[string]int { return h.ports }

func (h *handle) Dial(ctx context.Context, port int) (net.Conn, error) {
	return h.net.Dial(ctx, port)
}

func (h *handle) Namespaced() bool      { return true }
func (h *handle) Done() <-chan struct{} { return h.ctr.Done() }

// Err says how the container's process ended, whether it ran out of disk,
// and the last lines it wrote to stderr (kept as they came: nothing of the
// node's files is read back).
func (h *handle) Err() error {
	how := "container process " + h.ctr.Exit().String()
	if full := h.ctr.Disk.Full(); full != "" {
		how += "; " + runtimes.OutOfDisk(full)
	}
	if s := h.tail.LastLines(20); s != "" {
		how += "; last lines of stderr:\n" + s
	}
	return errors.New(how)
}

func (h *handle) Stop(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace+time.Minute)
	defer cancel()
	// A stop right after the start must reach the command, not the init's
	// runtime still starting (ctrinit.WaitReady); a few milliseconds at most.
	if h.ctr != nil {
		ctrinit.WaitReady(h.ctr.Pid, min(grace, 5*time.Second))
	}
	if _, err := h.r.rc.Stop(ctx, h.id, grace); err != nil {
		h.r.cfg.Log.Warn("container did not stop; it is removed by force", "container", h.id, "err", err)
	}
}

// Remove deletes the container (its processes, cgroups, mounts, folder),
// closes its network namespace and lets the cache evict its image again.
func (h *handle) Remove() {
	h.once.Do(func() {
		if h.ctr != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := h.r.rc.Delete(ctx, h.id); err != nil {
				h.r.cfg.Log.Warn("container not fully removed; the agent's next start removes the rest", "container", h.id, "err", err)
			}
		}
		if h.net != nil {
			h.net.Ended()
		}
		h.rf.Release()
		if h.cache != nil {
			h.cache.Release()
		}
	})
}

func (h *handle) LogAttrs() []any {
	attrs := []any{"container", h.id, "image", h.rf.Digest, "imageCached", !h.rf.Pulled}
	if h.ctr != nil {
		attrs = append(attrs, "pid", h.ctr.Pid)
	}
	return attrs
}
