package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testImage builds an image of two layers, the second whiting out a file
// of the first.
func testImage(t testing.TB, marker string) v1.Image {
	t.Helper()
	l1 := layerOf(t, layerTar(t,
		tent{name: "bin/", typ: tar.TypeDir},
		tent{name: "bin/hello", body: "hello " + marker, mode: 0o755},
		tent{name: "etc/secret", body: "removed by the next layer"}))
	l2 := layerOf(t, layerTar(t, tent{name: "etc/.wh.secret"}, tent{name: "etc/motd", body: marker}))
	img, err := mutate.AppendLayers(empty.Image, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	p := NodePlatform()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	cf.Config.Cmd = []string{"/bin/hello"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func layerOf(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testRegistry serves an in-process registry; wrap, when set, stands
// between the client and it.
func testRegistry(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t testing.TB, host, repo string, img v1.Image) string {
	t.Helper()
	ref := host + "/" + repo
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: "operator", Password: "s3cret"})); err != nil {
		t.Fatal(err)
	}
	return ref
}

func openCache(t testing.TB, opt CacheOptions) *Cache {
	t.Helper()
	c, err := OpenCache(filepath.Join(t.TempDir(), "images"), opt)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPullAndCache(t *testing.T) {
	var blobGets atomic.Int32
	host := testRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				blobGets.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	ref := push(t, host, "team/tools:v1", testImage(t, "pulled"))
	ctx := context.Background()
	c := openCache(t, CacheOptions{})

	img, err := Puller{}.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := c.Get(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Release()
	if !rf.Pulled {
		t.Error("the first Get says it was cached")
	}
	if b, err := os.ReadFile(filepath.Join(rf.Dir, "etc/motd")); err != nil || string(b) != "pulled" {
		t.Errorf("etc/motd = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(rf.Dir, "etc/secret")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etc/secret survived its whiteout: %v", err)
	}
	if len(rf.Config.Cmd) != 1 || rf.Config.Cmd[0] != "/bin/hello" {
		t.Errorf("config cmd = %v", rf.Config.Cmd)
	}

	// A second lease of the image downloads and unpacks nothing.
	before := blobGets.Load()
	img2, err := Puller{}.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	rf2, err := c.Get(ctx, img2)
	if err != nil {
		t.Fatal(err)
	}
	defer rf2.Release()
	if rf2.Pulled || rf2.Dir != rf.Dir {
		t.Errorf("second Get: pulled=%v dir=%s, want the cached %s", rf2.Pulled, rf2.Dir, rf.Dir)
	}
	if n := blobGets.Load() - before; n != 1 {
		t.Errorf("second Get fetched %d blobs, want only the config", n)
	}

	// A restarted agent finds the cache as it was.
	c2, err := OpenCache(c.dir, CacheOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rf3, err := c2.Get(ctx, img2)
	if err != nil || rf3.Pulled {
		t.Fatalf("after reopening: pulled=%v err=%v", rf3 != nil && rf3.Pulled, err)
	}
	rf3.Release()

	// Entries unpacked for another user namespace mapping are dropped.
	c3, err := OpenCache(c.dir, CacheOptions{Apply: ApplyOptions{IDShift: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	if d := c3.Digests(); len(d) != 0 {
		t.Fatalf("entries of another owners' shift kept: %v", d)
	}
}

func TestPullCredentialsFromNodeConfig(t *testing.T) {
	host := testRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "operator" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"who are you"}]}`, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ref := push(t, host, "private/app:v1", testImage(t, "private"))
	ctx := context.Background()

	if _, err := (Puller{}).Pull(ctx, ref); err == nil {
		t.Fatal("an anonymous pull of a private image succeeded")
	}
	cfgPath := filepath.Join(t.TempDir(), "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte("operator:s3cret"))
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, auth)), 0o600); err != nil {
		t.Fatal(err)
	}
	kc, err := KeychainFromFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Puller{Keychain: kc}.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := openCache(t, CacheOptions{}).Get(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	rf.Release()
}

func TestBadImages(t *testing.T) {
	ctx := context.Background()
	var corrupt atomic.Bool
	host := testRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if corrupt.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				b := rec.Body.Bytes()
				if len(b) > 32<<10 {
					b[len(b)/2] ^= 0xff
				}
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.Code)
				w.Write(b)
				return
			}
			h.ServeHTTP(w, r)
		})
	})

	other := testImage(t, "arm")
	cf, _ := other.ConfigFile()
	cf = cf.DeepCopy()
	cf.Architecture = "not-" + NodePlatform().Architecture
	other, _ = mutate.ConfigFile(other, cf)

	odd, err := mutate.Append(testImage(t, "odd"), mutate.Addendum{
		Layer: layerOf(t, layerTar(t, tent{name: "x", body: "y"})), MediaType: types.MediaType("application/vnd.example.weird")})
	if err != nil {
		t.Fatal(err)
	}
	bigLayer, err := random.Layer(64<<10, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	big, _ := mutate.AppendLayers(testImage(t, "big"), bigLayer)

	refs := map[string]string{
		"platform": push(t, host, "other:v1", other),
		"media":    push(t, host, "odd:v1", odd),
		"digest":   push(t, host, "big:v1", big),
	}
	for _, tc := range []struct {
		name    string
		ref     string
		corrupt bool
		want    string
		is      error
	}{
		{"not found", host + "/nothing:here", false, "not found", ErrNotFound},
		{"platform", refs["platform"], false, "this node runs", ErrPlatform},
		{"media type", refs["media"], false, "unsupported media type", nil},
		{"digest mismatch", refs["digest"], true, "digest", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			corrupt.Store(tc.corrupt)
			defer corrupt.Store(false)
			c := openCache(t, CacheOptions{})
			img, err := Puller{}.Pull(ctx, tc.ref)
			if err == nil {
				var rf *Rootfs
				rf, err = c.Get(ctx, img)
				if err == nil {
					rf.Release()
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if len(c.Digests()) != 0 {
				t.Fatalf("a refused image was cached")
			}
			if des, _ := os.ReadDir(c.dir); len(des) != 0 {
				t.Fatalf("a refused image left %v in the cache folder", des)
			}
		})
	}
}

func TestArchives(t *testing.T) {
	ctx := context.Background()
	img := testImage(t, "archived")
	want, _ := img.ConfigName()
	dir := t.TempDir()

	// An OCI image layout in a tar.
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	p := NodePlatform()
	if err := lp.AppendImage(img, layout.WithPlatform(p)); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(dir, "oci.tar")
	tarFolder(t, filepath.Join(dir, "layout"), ociTar)

	// A docker save tarball.
	dockerTar := filepath.Join(dir, "docker.tar")
	tag, _ := name.NewTag("example/app:v1")
	if err := tarball.WriteToFile(dockerTar, tag, img); err != nil {
		t.Fatal(err)
	}

	c := openCache(t, CacheOptions{})
	for i, archive := range []string{ociTar, dockerTar} {
		scratch := t.TempDir()
		a, err := OpenArchive(archive, scratch, nil)
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		rf, err := c.Get(ctx, a)
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if rf.Digest != want.String() {
			t.Errorf("%s: digest %s, want %s", archive, rf.Digest, want)
		}
		// Both archives hold one image: the second is found in the cache.
		if rf.Pulled != (i == 0) {
			t.Errorf("%s: pulled = %v", archive, rf.Pulled)
		}
		if b, _ := os.ReadFile(filepath.Join(rf.Dir, "etc/motd")); string(b) != "archived" {
			t.Errorf("%s: etc/motd = %q", archive, b)
		}
		rf.Release()
	}

	// An archive with a symbolic link among its blobs is refused: the
	// layout reader would follow it out of the scratch folder.
	evil := filepath.Join(dir, "evil.tar")
	if err := os.WriteFile(evil, layerTar(t,
		tent{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`},
		tent{name: "index.json", body: `{}`},
		tent{name: "blobs/sha256/aa", typ: tar.TypeSymlink, link: "/etc/shadow"}), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenArchive(evil, t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "only files and folders") {
		t.Fatalf("err = %v", err)
	}
	if _, err := OpenArchive(filepath.Join(dir, "layout", "index.json"), t.TempDir(), nil); err == nil {
		t.Fatal("a file that is no tar was taken for an archive")
	}
}

func tarFolder(t testing.TB, dir, out string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { now = now.Add(time.Second); return now }
	imgs := []v1.Image{testImage(t, "a"), testImage(t, "bb"), testImage(t, "ccc")}
	// Each image is 33 to 37 bytes of files (the whited-out file counts): room for two.
	c := openCache(t, CacheOptions{MaxBytes: 75, Now: clock})
	digest := func(img v1.Image) string { d, _ := img.ConfigName(); return d.String() }

	get := func(img v1.Image) *Rootfs {
		t.Helper()
		rf, err := c.Get(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		return rf
	}
	get(imgs[0]).Release()
	held := get(imgs[1]) // held: not evictable
	get(imgs[0]).Release()
	// imgs[1] is the least recently used but held; imgs[0] goes.
	get(imgs[2]).Release()
	got := c.Digests()
	if len(got) != 2 || got[0] != digest(imgs[1]) || got[1] != digest(imgs[2]) {
		t.Fatalf("cached %v, want [%s %s]", got, digest(imgs[1]), digest(imgs[2]))
	}
	held.Release()
	if _, err := os.Stat(held.Dir); err != nil {
		t.Fatalf("within the bound, a released image went: %v", err)
	}
	if c.Bytes() > 75 {
		t.Fatalf("cache holds %d bytes, bound 75", c.Bytes())
	}
	if rf := get(imgs[0]); !rf.Pulled {
		t.Fatal("an evicted image was found in the cache")
	} else {
		rf.Release()
	}
}

func TestConcurrentGetsUnpackOnce(t *testing.T) {
	ctx := context.Background()
	c := openCache(t, CacheOptions{})
	img := testImage(t, "concurrent")
	const n = 8
	results := make(chan *Rootfs, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			rf, err := c.Get(ctx, img)
			if err != nil {
				errs <- err
				return
			}
			results <- rf
		}()
	}
	pulled := 0
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case rf := <-results:
			if rf.Pulled {
				pulled++
			}
			rf.Release()
		}
	}
	if pulled != 1 {
		t.Fatalf("%d of %d concurrent Gets unpacked the image, want 1", pulled, n)
	}
}

// What the image library reads whole from an image archive (its index,
// manifest.json, the manifests and configs they name) is bounded by its
// size in the archive before it is read: a member's archive of a few
// hundred KB of zstd could otherwise hold a config of gigabytes.
func TestArchiveMetadataBounded(t *testing.T) {
	big := strings.Repeat(" ", maxMetadataBytes+1)
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		entries []tent
		want    string
	}{
		{"an index too large", []tent{
			{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`}, {name: "index.json", body: "{}" + big}},
			"image archive: index.json is 4.0 MiB, more than the 4.0 MiB an image's metadata may be"},
		{"a manifest blob too large", []tent{
			{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`},
			{name: "index.json", body: `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":5,"digest":"sha256:` + strings.Repeat("a", 64) + `"}]}`},
			{name: "blobs/sha256/" + strings.Repeat("a", 64), body: big}},
			"image archive: blobs/sha256/" + strings.Repeat("a", 64) + " is 4.0 MiB, more than"},
		{"a docker config too large", []tent{
			{name: "manifest.json", body: `[{"Config":"config.json","RepoTags":[],"Layers":[]}]`}, {name: "config.json", body: big}},
			"image archive: config.json is 4.0 MiB, more than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".tar")
			if err := os.WriteFile(file, layerTar(t, c.entries...), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenArchive(file, t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}
