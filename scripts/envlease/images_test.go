package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// testImage is a small random image of platform os/arch.
func testImage(t *testing.T, os_, arch string) v1.Image {
	t.Helper()
	img, err := random.Image(4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = os_, arch
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// ociArchive writes an OCI image layout of imgs as a tar; spoil, when set,
// changes the layout folder before it is packed.
func ociArchive(t *testing.T, file string, spoil func(dir string), imgs ...v1.Image) {
	t.Helper()
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		cf, _ := img.ConfigFile()
		if err := lp.AppendImage(img, layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture})); err != nil {
			t.Fatal(err)
		}
	}
	if spoil != nil {
		spoil(dir)
	}
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestImagesPushAndList(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	dir := t.TempDir()

	oci := filepath.Join(dir, "tool.tar")
	ociArchive(t, oci, nil, testImage(t, "linux", "amd64"), testImage(t, "linux", "arm64"))
	docker := filepath.Join(dir, "saved.tar")
	tag, _ := name.NewTag("registry.example/saved:1")
	if err := tarball.WriteToFile(docker, tag, testImage(t, "linux", "arm64")); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(plain, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A plain artifact is not listed as an image.
	u.ok("artifacts", "push", plain)

	// Table output: the id alone on standard output, a hint on standard error.
	r := u.run("", "images", "push", oci, "--name", "tool-1.2")
	if r.code != 0 {
		t.Fatalf("push: exit %d: %s", r.code, r.stderr)
	}
	ociID := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(ociID, "art_") || strings.Contains(ociID, "\n") ||
		!strings.Contains(r.stderr, `"image": {"artifact": "`+ociID+`"}`) || !strings.Contains(r.stderr, "linux/amd64, linux/arm64") {
		t.Fatalf("push printed %q, said %q", r.stdout, r.stderr)
	}
	var art domain.Artifact
	u.json(&art, "images", "push", docker)
	if art.State != domain.ArtifactSealed || art.ContentType != domain.DockerArchiveContentType || art.Labels["platforms"] != "linux/arm64" ||
		art.Name != "saved.tar" || !art.Expires.After(art.Created.Add(89*24*3600e9)) {
		t.Fatalf("pushed %+v", art)
	}

	var list struct {
		Images []domain.Artifact `json:"images"`
	}
	u.json(&list, "images", "ls")
	if len(list.Images) != 2 || list.Images[0].ID != art.ID || list.Images[1].ID != ociID ||
		list.Images[1].ContentType != domain.ImageLayoutContentType || list.Images[1].Labels["platforms"] != "linux/amd64,linux/arm64" {
		b, _ := json.Marshal(list)
		t.Fatalf("ls: %s", b)
	}
	contains(t, "images ls", u.ok("images", "ls"), "PLATFORMS", ociID, "tool-1.2", "linux/amd64,linux/arm64", art.ID, "saved.tar")
}

func TestImagesPushRefusesWhatIsNoImage(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	dir := t.TempDir()

	plain := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(plain, []byte("not an image, not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(dir, "image.tar.gz")
	if err := os.WriteFile(gz, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing-layer.tar")
	ociArchive(t, missing, func(d string) {
		blobs, _ := filepath.Glob(filepath.Join(d, "blobs", "sha256", "*"))
		// The largest blob is a layer.
		var big string
		var size int64
		for _, b := range blobs {
			if info, _ := os.Stat(b); info.Size() > size {
				big, size = b, info.Size()
			}
		}
		if err := os.Remove(big); err != nil {
			t.Fatal(err)
		}
	}, testImage(t, "linux", "amd64"))

	for _, c := range []struct{ file, says string }{
		{plain, "not an image archive"},
		{gz, "gzip-compressed"},
		{missing, "layer"},
	} {
		r := u.fails(exitUsage, "", "images", "push", c.file)
		if !strings.Contains(r.stderr, c.says) {
			t.Errorf("%s: %s", filepath.Base(c.file), r.stderr)
		}
	}
	var list struct {
		Images []domain.Artifact `json:"images"`
	}
	u.json(&list, "images", "ls")
	if len(list.Images) != 0 {
		t.Fatalf("refused archives were uploaded: %+v", list.Images)
	}
}
