package image

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"runtime"
	"strings"

	"github.com/docker/cli/cli/config"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/envlease/envlease/shared/agent/archive"
)

// ErrNotFound: the registry has no image of that reference.
var ErrNotFound = errors.New("image not found")

// NodePlatform is the platform this node runs images of.
func NodePlatform() v1.Platform {
	return v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
}

// KeychainFromFile reads registry credentials from a Docker-style config
// file ("auths", "credHelpers", "credsStore") that the node's operator
// wrote; an empty path gives anonymous access. Credentials never come from a
// template: a member could otherwise make the node present an operator's
// credentials to a registry of the member's choosing.
func KeychainFromFile(path string) (authn.Keychain, error) {
	if path == "" {
		return anonymous{}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	defer f.Close()
	cf, err := config.LoadFromReader(f)
	if err != nil {
		return nil, fmt.Errorf("registry credentials %s: %w", path, err)
	}
	return fileKeychain{get: func(key string) (authn.AuthConfig, error) {
		c, err := cf.GetAuthConfig(key)
		return authn.AuthConfig{Username: c.Username, Password: c.Password, Auth: c.Auth,
			IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken}, err
	}}, nil
}

type anonymous struct{}

func (anonymous) Resolve(authn.Resource) (authn.Authenticator, error) { return authn.Anonymous, nil }

type fileKeychain struct {
	get func(key string) (authn.AuthConfig, error)
}

// Resolve looks the repository up first, then its registry, as docker does.
func (k fileKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	for _, key := range []string{r.String(), r.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		c, err := k.get(key)
		if err != nil {
			return nil, err
		}
		if c != (authn.AuthConfig{}) {
			return authn.FromConfig(c), nil
		}
	}
	return authn.Anonymous, nil
}

// Puller pulls images from registries.
type Puller struct {
	// Keychain gives the node's registry credentials (KeychainFromFile).
	Keychain authn.Keychain
	// Platform the node runs (default NodePlatform).
	Platform *v1.Platform
	// Insecure allows registries over plain HTTP (loopback and private
	// addresses are always reached over HTTP, as go-containerregistry does).
	Insecure bool
	// Transport, when set, carries the requests.
	Transport http.RoundTripper
}

func (p Puller) platform() v1.Platform {
	if p.Platform != nil {
		return *p.Platform
	}
	return NodePlatform()
}

// Pull resolves ref (a tag or a digest) to the image of the node's
// platform. Layers are fetched when the cache applies them.
func (p Puller) Pull(ctx context.Context, ref string) (v1.Image, error) {
	var nopt []name.Option
	if p.Insecure {
		nopt = append(nopt, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopt...)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	kc := p.Keychain
	if kc == nil {
		kc = anonymous{}
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithPlatform(p.platform())}
	if p.Transport != nil {
		opts = append(opts, remote.WithTransport(p.Transport))
	}
	img, err := remote.Image(r, opts...)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && (te.StatusCode == http.StatusNotFound || hasCode(te, transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode)) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
		}
		if strings.Contains(err.Error(), "no child with platform") {
			return nil, fmt.Errorf("image %s has no %s variant: %w", ref, p.platform(), ErrPlatform)
		}
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	return img, nil
}

func hasCode(te *transport.Error, codes ...transport.ErrorCode) bool {
	for _, d := range te.Errors {
		for _, c := range codes {
			if d.Code == c {
				return true
			}
		}
	}
	return false
}

// ErrPlatform: the image is for another platform than the node's.
var ErrPlatform = errors.New("the image is for another platform than this node's")

// OpenArchive reads an OCI image archive: an OCI image layout in a tar (as
// "docker buildx --output type=oci" and "crane pull --format=oci" write it)
// or a "docker save" tarball. An OCI layout is first unpacked, files and
// folders only, into scratch (an empty folder the caller removes after the
// image is applied); a docker tarball is read in place. platform picks the
// image of an index (nil: the node's).
func OpenArchive(file, scratch string, platform *v1.Platform) (v1.Image, error) {
	kind, sizes, manifest, err := archiveKind(file)
	if err != nil {
		return nil, err
	}
	p := NodePlatform()
	if platform != nil {
		p = *platform
	}
	switch kind {
	case "docker":
		// The library reads manifest.json (bounded by archiveKind) and
		// each image's config whole: bound the configs first.
		var entries []struct{ Config string }
		if err := json.Unmarshal(manifest, &entries); err != nil {
			return nil, fmt.Errorf("image archive: manifest.json: %w", err)
		}
		for _, e := range entries {
			if err := sizes.small(path.Clean(strings.TrimPrefix(e.Config, "/"))); err != nil {
				return nil, err
			}
		}
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return nil, fmt.Errorf("image archive: %w", err)
		}
		return img, nil
	case "oci":
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		root, err := os.OpenRoot(scratch)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		// Files and folders only: layout reads its blobs with plain opens,
		// which a symbolic link in the archive could lead anywhere.
		a := NewApplier(root, ApplyOptions{filesOnly: true})
		if err := a.Apply(f); err != nil {
			return nil, fmt.Errorf("image archive: %w", err)
		}
		idx, err := layout.ImageIndexFromPath(scratch)
		if err != nil {
			return nil, fmt.Errorf("image archive: %w", err)
		}
		return fromIndex(idx, p, 0, sizes)
	}
	return nil, errors.New("image archive: neither an OCI image layout (oci-layout, index.json) nor a docker save tarball (manifest.json)")
}

// maxMetadataBytes bounds the files of an image archive that the image
// library reads whole into memory (manifest.json, index.json, oci-layout,
// every manifest, index and config blob): real ones are a few KB.
const maxMetadataBytes = 4 << 20

// An image archive itself (not its layers) holds a few files per layer:
// its pass keeps the name and size of each, within these bounds.
const (
	maxArchiveMembers     = 10_000
	maxArchiveMemberNames = 16 << 20
)

// blobSizes are the sizes of an image archive's regular files, by name.
type blobSizes map[string]int64

// small refuses a file the image library would read whole when it is larger
// than maxMetadataBytes (or missing: the library says which then).
func (b blobSizes) small(name string) error {
	if n, ok := b[name]; ok && n > maxMetadataBytes {
		return fmt.Errorf("image archive: %s is %s, more than the %s an image's metadata may be", name, archive.SizeText(n), archive.SizeText(maxMetadataBytes))
	}
	return nil
}

// blobName is where an OCI layout keeps a blob.
func blobName(d v1.Hash) string { return "blobs/" + d.Algorithm + "/" + d.Hex }

// archiveKind looks at the archive's names. The pass is bounded like every
// pass over a member's archive (archive.Reader): entries and names before
// anything is kept. It keeps the size of each regular file, and
// manifest.json (at most maxMetadataBytes), so that what the image library
// reads whole can be bounded first.
func archiveKind(file string) (kind string, sizes blobSizes, manifest []byte, err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", nil, nil, err
	}
	defer f.Close()
	budget := archive.NewBudget(archive.Limits{MaxEntries: maxArchiveMembers, MaxBytes: -1, MaxRatio: -1,
		MaxNameBytes: DefaultMaxNameBytes, MaxNamesBytes: maxArchiveMemberNames}).Fixed()
	tr := archive.NewReader(f, budget, 0)
	sizes = blobSizes{}
	var layoutFile, index bool
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, nil, fmt.Errorf("image archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA {
			continue
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		sizes[name] = h.Size
		switch name {
		case "oci-layout", "index.json", "manifest.json":
			if err := sizes.small(name); err != nil {
				return "", nil, nil, err
			}
		}
		switch name {
		case "oci-layout":
			layoutFile = true
		case "index.json":
			index = true
		case "manifest.json":
			if manifest, err = io.ReadAll(tr); err != nil {
				return "", nil, nil, fmt.Errorf("image archive: %w", err)
			}
		}
	}
	switch {
	case layoutFile && index:
		return "oci", sizes, manifest, nil
	case manifest != nil:
		return "docker", sizes, manifest, nil
	}
	return "", nil, nil, nil
}

// fromIndex picks the image of platform p, following nested indexes. Each
// manifest, index and config it reads whole is first held to
// maxMetadataBytes by its size in the archive.
func fromIndex(idx v1.ImageIndex, p v1.Platform, depth int, sizes blobSizes) (v1.Image, error) {
	if depth > 4 {
		return nil, errors.New("image archive: indexes nested too deep")
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image archive: %w", err)
	}
	var only []v1.Descriptor
	for _, d := range m.Manifests {
		if d.MediaType.IsImage() || d.MediaType.IsIndex() {
			only = append(only, d)
		}
	}
	for _, d := range only {
		if d.Platform != nil && !d.Platform.Satisfies(p) {
			continue
		}
		// A descriptor without a platform is taken when it is the only one.
		if d.Platform == nil && len(only) > 1 {
			continue
		}
		if err := sizes.small(blobName(d.Digest)); err != nil {
			return nil, err
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("image archive: %w", err)
			}
			return fromIndex(child, p, depth+1, sizes)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("image archive: %w", err)
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, fmt.Errorf("image archive: %w", err)
		}
		if err := sizes.small(blobName(m.Config.Digest)); err != nil {
			return nil, err
		}
		return img, nil
	}
	if len(only) == 0 {
		return nil, errors.New("image archive: the index names no image")
	}
	return nil, fmt.Errorf("image archive has no %s image: %w", p, ErrPlatform)
}
