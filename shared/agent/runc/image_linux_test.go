package runc

import (
	"archive/tar"
	"bytes"

	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/image"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// busyboxImage makes an image of the busybox root filesystem plus a layer
// that writes /etc/motd, and pushes it to a registry served in the test.
func busyboxImage(t *testing.T) string {
	t.Helper()
	var base bytes.Buffer
	tw := tar.NewWriter(&base)
	if err := tw.AddFS(os.DirFS(lowerDir)); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	var top bytes.Buffer
	tw = tar.NewWriter(&top)
	motd := "from the image\n"
	tw.WriteHeader(&tar.Header{Name: "etc/motd", Mode: 0o644, Size: int64(len(motd)), Typeflag: tar.TypeReg})
	tw.Write([]byte(motd))
	tw.Close()
	var layers []v1.Layer
	for _, b := range [][]byte{base.Bytes(), top.Bytes()} {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	p := image.NodePlatform()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/tools/busybox:1"
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestContainerFromPulledImage(t *testing.T) {
	ref := busyboxImage(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		shift  int
		userns *IDMap
	}{
		{"root", 0, nil},
		// In a user namespace the container's root is the node's 100000:
		// the cache shifts the image's owners alike.
		{"user namespace", 100000, &IDMap{HostID: 100000, Size: 65536}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache, err := image.OpenCache(filepath.Join(t.TempDir(), "images"),
				image.CacheOptions{Apply: image.ApplyOptions{Owners: true, IDShift: tc.shift}})
			if err != nil {
				t.Fatal(err)
			}
			img, err := image.Puller{}.Pull(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			rf, err := cache.Get(ctx, img)
			if err != nil {
				t.Fatal(err)
			}
			defer rf.Release()
			r := newRuntime(t, "")
			ctr, exit := runImage(t, r, rf.Dir, Config{ID: newID(t), UserNS: tc.userns,
				Args: []string{"sh", "-c", "cat /etc/motd; echo changed > /etc/motd; id -u; cat /proc/self/uid_map"}})
			out := logOf(t, ctr, "stdout.log")
			if exit.Code != 0 || !strings.HasPrefix(out, "from the image\n0\n") {
				t.Fatalf("exit %+v, stdout %q, stderr %q", exit, out, logOf(t, ctr, "stderr.log"))
			}
			if tc.userns != nil && !strings.Contains(out, "100000") {
				t.Errorf("uid_map = %q, want the mapping to 100000", out)
			}
			// The write went to the environment's upper folder; the cached
			// image is as it was for the next environment.
			if b, _ := os.ReadFile(filepath.Join(rf.Dir, "etc/motd")); string(b) != "from the image\n" {
				t.Errorf("cached image changed: %q", b)
			}
		})
	}

}
