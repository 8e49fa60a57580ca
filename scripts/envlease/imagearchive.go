package main

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/envlease/envlease/shared/domain"
)

// imageArchive is what `images push` found in an archive before uploading it.
type imageArchive struct {
	// Kind is "oci" (an OCI image layout in a tar) or "docker" (a docker
	// save tarball); ContentType the artifact's for that kind.
	Kind        string `json:"kind"`
	ContentType string `json:"contentType"`
	// Platforms are those of the archive's images (os/arch[/variant]).
	Platforms []string `json:"platforms"`
}

// errNotImageArchive says what an image archive is, for a file that is none.
var errNotImageArchive = errors.New("not an image archive: push an OCI image layout in a tar (oci-layout, index.json, blobs/; " +
	"docker buildx --output type=oci, crane pull --format=oci) or a docker save tarball (manifest.json), uncompressed")

// inspectImageArchive checks that file is an image archive the nodes can run
// (go-containerregistry reads it as the node will) and says which platforms
// it holds. An OCI layout is unpacked, files and folders only, into a
// temporary folder to be read; a docker tarball is read in place.
func inspectImageArchive(file string) (imageArchive, error) {
	names, err := tarNames(file)
	if err != nil {
		return imageArchive{}, err
	}
	switch {
	case names["oci-layout"] && names["index.json"]:
		ps, err := inspectLayout(file)
		if err != nil {
			return imageArchive{}, fmt.Errorf("%s: OCI image layout: %w", file, err)
		}
		return imageArchive{Kind: "oci", ContentType: domain.ImageLayoutContentType, Platforms: ps}, nil
	case names["manifest.json"]:
		p, err := inspectDockerArchive(file, names)
		if err != nil {
			return imageArchive{}, fmt.Errorf("%s: docker save tarball: %w", file, err)
		}
		return imageArchive{Kind: "docker", ContentType: domain.DockerArchiveContentType, Platforms: []string{p}}, nil
	}
	return imageArchive{}, fmt.Errorf("%s: %w", file, errNotImageArchive)
}

// tarNames reads the archive's entry names (cleaned, relative).
func tarNames(file string) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return nil, fmt.Errorf("%s is gzip-compressed: %w", file, errNotImageArchive)
	}
	names := map[string]bool{}
	tr := tar.NewReader(br)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w (%v)", file, errNotImageArchive, err)
		}
		names[path.Clean(strings.TrimPrefix(h.Name, "/"))] = true
	}
	return names, nil
}

func inspectDockerArchive(file string, names map[string]bool) (string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		return "", err
	}
	if len(m) != 1 {
		return "", fmt.Errorf("it holds %d images; save exactly one", len(m))
	}
	for _, l := range m[0].Layers {
		if !names[path.Clean(l)] {
			return "", fmt.Errorf("layer %s is missing", l)
		}
	}
	img, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	if len(cf.RootFS.DiffIDs) != len(m[0].Layers) {
		return "", fmt.Errorf("its configuration names %d layers, its manifest %d", len(cf.RootFS.DiffIDs), len(m[0].Layers))
	}
	return platformOf(cf.OS, cf.Architecture, cf.Variant), nil
}

func inspectLayout(file string) ([]string, error) {
	dir, err := os.MkdirTemp("", "envlease-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := unpackFiles(file, dir); err != nil {
		return nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	var ps []string
	if err := walkIndex(layout.Path(dir), idx, &ps, 0); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, errors.New("its index names no image")
	}
	return ps, nil
}

// walkIndex checks every image of idx (manifest, configuration, and that
// each layer's blob is there at its size) and gathers their platforms.
// Attestations (platform unknown/unknown) are not images to run.
func walkIndex(lp layout.Path, idx v1.ImageIndex, ps *[]string, depth int) error {
	if depth > 4 {
		return errors.New("indexes nested too deep")
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		switch {
		case d.Platform != nil && d.Platform.OS == "unknown":
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			if err := walkIndex(lp, child, ps, depth+1); err != nil {
				return err
			}
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err != nil {
				return err
			}
			if err := validate.Image(img, validate.Fast); err != nil {
				return fmt.Errorf("image %s: %w", d.Digest, err)
			}
			im, err := img.Manifest()
			if err != nil {
				return err
			}
			for _, l := range im.Layers {
				info, err := os.Stat(filepath.Join(string(lp), "blobs", l.Digest.Algorithm, l.Digest.Hex))
				if err != nil || info.Size() != l.Size {
					return fmt.Errorf("image %s: layer %s is missing or not %d bytes", d.Digest, l.Digest, l.Size)
				}
			}
			cf, err := img.ConfigFile()
			if err != nil {
				return err
			}
			if p := platformOf(cf.OS, cf.Architecture, cf.Variant); !slices.Contains(*ps, p) {
				*ps = append(*ps, p)
			}
		}
	}
	return nil
}

func platformOf(os, arch, variant string) string {
	if variant != "" {
		return os + "/" + arch + "/" + variant
	}
	return os + "/" + arch
}

// unpackFiles unpacks the archive's files and folders under dir, confined
// to it (os.Root refuses names that leave it); links and devices are
// skipped: an OCI layout holds none.
func unpackFiles(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			out, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
