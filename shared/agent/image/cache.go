package image

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/singleflight"
)

// DefaultCacheBytes bounds a cache whose options name no bound.
const DefaultCacheBytes = 20 << 30

// CacheOptions tune a Cache.
type CacheOptions struct {
	// MaxBytes bounds the bytes of the files of all cached root filesystems
	// (default DefaultCacheBytes). Past it the least recently used images
	// that no environment holds are removed.
	MaxBytes int64
	// Apply bounds and tunes the unpacking of one image.
	Apply ApplyOptions
	// Platform the node runs (default NodePlatform).
	Platform *v1.Platform
	Now      func() time.Time
	Log      *slog.Logger
}

// Cache keeps unpacked root filesystems on disk, one folder per image
// config digest: dir/sha256-HEX/rootfs, with meta.json beside it. The
// config digest names the content (it lists the layers' uncompressed
// digests), so an image pulled and the same image loaded from an archive
// share one entry. Root filesystems are shared read-only by every
// environment of the image (the lower folder of each one's overlay).
type Cache struct {
	dir    string
	opt    CacheOptions
	mu     sync.Mutex
	items  map[string]*item // by folder name
	flight singleflight.Group
}

type item struct {
	Digest   string    `json:"digest"`
	Bytes    int64     `json:"bytes"`
	Entries  int       `json:"entries"`
	LastUsed time.Time `json:"lastUsed"`
	Config   v1.Config `json:"config"`
	// IDShift is the owners' shift it was unpacked with: an entry of
	// another shift is of no use to this node's user namespaces.
	IDShift int `json:"idShift,omitempty"`
	refs    int
}

// Rootfs is a cached root filesystem held by a caller until Release.
type Rootfs struct {
	Digest string    // the image's config digest
	Dir    string    // the root filesystem; never write to it
	Config v1.Config // entrypoint, cmd, env, working folder, user
	Bytes  int64
	// Pulled says whether this call unpacked it (false: it was cached).
	Pulled  bool
	release func()
	once    sync.Once
}

// Release lets the cache evict the root filesystem again.
func (r *Rootfs) Release() { r.once.Do(r.release) }

// OpenCache opens (creating) the cache folder dir and reads what an earlier
// run left there; half-unpacked folders of a run that was killed are removed.
func OpenCache(dir string, opt CacheOptions) (*Cache, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultCacheBytes
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, opt: opt, items: map[string]*item{}}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if strings.HasPrefix(de.Name(), ".tmp-") {
			_ = os.RemoveAll(p)
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, "meta.json"))
		var it item
		if err == nil {
			err = json.Unmarshal(b, &it)
		}
		if err == nil && it.IDShift != opt.Apply.IDShift {
			err = fmt.Errorf("unpacked with owners shifted by %d, the node shifts by %d", it.IDShift, opt.Apply.IDShift)
		}
		if err != nil || folderName(it.Digest) != de.Name() {
			opt.Log.Warn("image cache: removing an unreadable entry", "entry", de.Name(), "err", err)
			_ = os.RemoveAll(p)
			continue
		}
		c.items[de.Name()] = &it
	}
	return c, nil
}

func folderName(digest string) string { return strings.Replace(digest, ":", "-", 1) }

// Bytes is what the cache holds now.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, it := range c.items {
		n += it.Bytes
	}
	return n
}

// Digests lists the cached images, least recently used first.
func (c *Cache) Digests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, it := range c.lru() {
		out = append(out, it.Digest)
	}
	return out
}

func (c *Cache) lru() []*item {
	var all []*item
	for _, it := range c.items {
		all = append(all, it)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].LastUsed.Before(all[j].LastUsed) })
	return all
}

// Get gives img's root filesystem, unpacking it first unless it is cached;
// concurrent calls for one image unpack it once. The caller holds it until
// Release.
func (c *Cache) Get(ctx context.Context, img v1.Image) (*Rootfs, error) {
	cf, digest, err := c.check(img)
	if err != nil {
		return nil, err
	}
	key := folderName(digest.String())
	pulled := false
	if rf := c.hold(key); rf != nil {
		return rf, nil
	}
	_, err, _ = c.flight.Do(key, func() (any, error) {
		c.mu.Lock()
		_, ok := c.items[key]
		c.mu.Unlock()
		if ok {
			return nil, nil
		}
		pulled = true
		return nil, c.unpack(ctx, img, cf, digest, key)
	})
	if err != nil {
		return nil, err
	}
	rf := c.hold(key)
	if rf == nil {
		return nil, fmt.Errorf("image %s: evicted while it was unpacked (the cache bound is below the image's size)", digest)
	}
	rf.Pulled = pulled
	c.evict()
	return rf, nil
}

// Lookup gives the cached root filesystem of the image whose config digest
// is digest, held until Release, or nil when the cache does not hold it:
// a node that knows an archive's image need not read the archive again.
func (c *Cache) Lookup(digest string) *Rootfs {
	return c.hold(folderName(digest))
}

// hold takes a reference on a cached entry and marks it used.
func (c *Cache) hold(key string) *Rootfs {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[key]
	if !ok {
		return nil
	}
	it.refs++
	it.LastUsed = c.opt.Now()
	c.writeMeta(key, it)
	return &Rootfs{Digest: it.Digest, Dir: filepath.Join(c.dir, key, "rootfs"), Config: it.Config, Bytes: it.Bytes,
		release: func() {
			c.mu.Lock()
			it.refs--
			c.mu.Unlock()
			c.evict()
		}}
}

func (c *Cache) writeMeta(key string, it *item) {
	b, _ := json.Marshal(it)
	p := filepath.Join(c.dir, key, "meta.json")
	if err := os.WriteFile(p+".new", b, 0o600); err == nil {
		err = os.Rename(p+".new", p)
		if err != nil {
			c.opt.Log.Warn("image cache: meta", "err", err)
		}
	}
}

// evict removes least recently used entries nobody holds until the cache
// is within its bound.
func (c *Cache) evict() {
	c.mu.Lock()
	var total int64
	for _, it := range c.items {
		total += it.Bytes
	}
	var gone []string
	for _, it := range c.lru() {
		if total <= c.opt.MaxBytes {
			break
		}
		if it.refs > 0 {
			continue
		}
		key := folderName(it.Digest)
		delete(c.items, key)
		total -= it.Bytes
		// Renamed under the lock so that a Get after it unpacks anew
		// into a fresh folder; removed outside it.
		tmp := filepath.Join(c.dir, ".tmp-evict-"+randomHex())
		if err := os.Rename(filepath.Join(c.dir, key), tmp); err == nil {
			gone = append(gone, tmp)
		}
		c.opt.Log.Info("image cache: evicted", "digest", it.Digest, "bytes", it.Bytes)
	}
	c.mu.Unlock()
	for _, p := range gone {
		_ = os.RemoveAll(p)
	}
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// supported layer media types: what the layers' Uncompressed reads.
var layerTypes = map[types.MediaType]bool{
	types.OCILayer:                       true,
	types.OCIUncompressedLayer:           true,
	types.OCILayerZStd:                   true,
	types.DockerLayer:                    true,
	types.DockerUncompressedLayer:        true,
	types.DockerForeignLayer:             true,
	types.OCIRestrictedLayer:             true,
	types.OCIUncompressedRestrictedLayer: true,
}

// check reads img's manifest and config, verifies the config against the
// manifest's digest and refuses what the node cannot run.
func (c *Cache) check(img v1.Image) (*v1.ConfigFile, v1.Hash, error) {
	mt, err := img.MediaType()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image manifest: %w", err)
	}
	if mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2 {
		return nil, v1.Hash{}, fmt.Errorf("unsupported image media type %q", mt)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image manifest: %w", err)
	}
	for _, l := range m.Layers {
		if !layerTypes[l.MediaType] {
			return nil, v1.Hash{}, fmt.Errorf("layer %s: unsupported media type %q", l.Digest, l.MediaType)
		}
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image config: %w", mismatch(err))
	}
	sum := sha256.Sum256(raw)
	digest := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if m.Config.Digest.Algorithm != "sha256" || digest != m.Config.Digest {
		return nil, v1.Hash{}, fmt.Errorf("image config: digest mismatch: the manifest names %s, the config is %s", m.Config.Digest, digest)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image config: %w", err)
	}
	p := NodePlatform()
	if c.opt.Platform != nil {
		p = *c.opt.Platform
	}
	if got := cf.Platform(); got != nil && !got.Satisfies(p) {
		return nil, v1.Hash{}, fmt.Errorf("image is for %s, this node runs %s: %w", got, p, ErrPlatform)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, v1.Hash{}, fmt.Errorf("image config lists %d layers, the manifest %d", len(cf.RootFS.DiffIDs), len(m.Layers))
	}
	return cf, digest, nil
}

// unpack applies img's layers into a scratch folder, each verified against
// its uncompressed digest in the (verified) config, and renames it into
// place: a cached folder is always complete.
func (c *Cache) unpack(ctx context.Context, img v1.Image, cf *v1.ConfigFile, digest v1.Hash, key string) error {
	tmp, err := os.MkdirTemp(c.dir, ".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	rootDir := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootDir, 0o755); err != nil {
		return err
	}
	if c.opt.Apply.Owners {
		if err := os.Chown(rootDir, c.opt.Apply.IDShift, c.opt.Apply.IDShift); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return err
	}
	defer root.Close()
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("image layers: %w", err)
	}
	a := NewApplier(root, c.opt.Apply)
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := applyLayer(ctx, a, l, cf.RootFS.DiffIDs[i]); err != nil {
			d, _ := l.Digest()
			return fmt.Errorf("layer %d (%s): %w", i+1, d, err)
		}
	}
	st := a.Stats()
	it := &item{Digest: digest.String(), Bytes: st.Bytes, Entries: st.Entries, LastUsed: c.opt.Now(), Config: cf.Config, IDShift: c.opt.Apply.IDShift}
	b, err := json.Marshal(it)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), b, 0o600); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.Rename(tmp, filepath.Join(c.dir, key)); err != nil {
		return err
	}
	c.items[key] = it
	c.opt.Log.Info("image cache: unpacked", "digest", it.Digest, "bytes", it.Bytes, "entries", it.Entries)
	return nil
}

// applyLayer applies one layer and checks what it read against diffID,
// reading the stream to its end (a tar's end marker may come before it).
func applyLayer(ctx context.Context, a *Applier, l v1.Layer, diffID v1.Hash) error {
	if diffID.Algorithm != "sha256" {
		return fmt.Errorf("unsupported digest algorithm %q", diffID.Algorithm)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(ctxReader{ctx, rc}, h)
	if err := a.Apply(r); err != nil {
		return mismatch(err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return mismatch(err)
	}
	if got := sum(h); got != diffID.Hex {
		return fmt.Errorf("digest mismatch: the config names %s, the layer is sha256:%s", diffID, got)
	}
	return nil
}

// mismatch words go-containerregistry's checksum errors (a blob that is not
// what its digest says) the way the other digest checks here do.
func mismatch(err error) error {
	if strings.Contains(err.Error(), "error verifying") && strings.Contains(err.Error(), "checksum") {
		return fmt.Errorf("digest mismatch: %w", err)
	}
	// A damaged compressed stream fails its own check before the blob's
	// digest is checked at its end: it is not what its digest says either.
	for _, s := range []string{"gzip: ", "flate: ", "zstd: "} {
		if strings.Contains(err.Error(), s) {
			return fmt.Errorf("digest mismatch: the layer's compressed data is damaged: %w", err)
		}
	}
	return err
}

func sum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// ctxReader ends a long unpacking when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
