package domain

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Runtimes a template runs under, and a node offers.
const (
	// RuntimeProcess runs the command as a process of the node, in a folder
	// of its own; a template without a runtime runs under it.
	RuntimeProcess = "process"
	// RuntimeContainer runs the command in an OCI container (runc) whose
	// root filesystem is the template's image.
	RuntimeContainer = "container"
)

// Runtimes are the known runtimes, in the order they are documented.
var Runtimes = []string{RuntimeProcess, RuntimeContainer}

// Content types `envlease images push` gives an artifact holding an image
// archive, by its kind; `envlease images ls` lists the artifacts of either.
const (
	// ImageLayoutContentType: an OCI image layout (oci-layout, index.json,
	// blobs/) in a tar, as `docker buildx --output type=oci` writes it.
	ImageLayoutContentType = "application/vnd.oci.image.layout.v1+tar"
	// DockerArchiveContentType: a `docker save` tarball (manifest.json).
	DockerArchiveContentType = "application/vnd.docker.image.archive.v1+tar"
)

// IsImageArchive reports whether an artifact's content type says it holds
// an image archive.
func IsImageArchive(contentType string) bool {
	return contentType == ImageLayoutContentType || contentType == DockerArchiveContentType
}

// Image names a container template's root filesystem: exactly one of an OCI
// image reference, pulled by the node from its registry with the node's own
// credentials, or a sealed artifact of the organization holding an OCI image
// archive, for nodes without registry access and images shipped through the
// API. One field with two forms rather than two fields: a container template
// needs exactly one, and the form says where the node gets it.
type Image struct {
	// Ref is a reference such as registry.example/team/tool:1.2@sha256:...;
	// a digest pins the image, a tag alone is resolved at every pull.
	Ref string `json:"ref,omitempty"`
	// Artifact is the id of a sealed artifact of the organization.
	Artifact string `json:"artifact,omitempty"`
}

// RuntimeOrDefault is the template's runtime, process when it names none.
func (t Template) RuntimeOrDefault() string {
	if t.Runtime == "" {
		return RuntimeProcess
	}
	return t.Runtime
}

// MaxTemplatePlatforms bounds a template's platforms: its pending
// environments are indexed under a key that names them all (Needs.Class),
// which must stay well inside DynamoDB's 2048 bytes.
const MaxTemplatePlatforms = 16

// platformPattern is os/arch with an optional variant, as Go and OCI name
// them: linux/amd64, linux/arm64, linux/arm/v7.
var platformPattern = regexp.MustCompile(`^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$`)

// ValidatePlatform checks one platform string; field names it in the 422.
func ValidatePlatform(field, p string) error {
	if len(p) > 64 || !platformPattern.MatchString(p) {
		return Invalid(field, "%s %q must be os/arch or os/arch/variant, such as linux/amd64 or linux/arm64", field, p)
	}
	return nil
}

// ValidateRuntime checks the template's runtime, image and platforms: a
// runtime the service knows, an image exactly when the runtime is
// container, and well-formed platforms. Whether an image artifact is sealed
// and the organization's is checked at lease, when it matters.
func (t Template) ValidateRuntime() error {
	rt := t.RuntimeOrDefault()
	if !slices.Contains(Runtimes, rt) {
		return Invalid("runtime", "runtime %q is not one of: %s (empty means process)", t.Runtime, strings.Join(Runtimes, ", "))
	}
	if len(t.Platforms) > MaxTemplatePlatforms {
		return Invalid("platforms", "a template names at most %d platforms, %s names %d", MaxTemplatePlatforms, t.Name, len(t.Platforms))
	}
	for i, p := range t.Platforms {
		if err := ValidatePlatform(fmt.Sprintf("platforms[%d]", i), p); err != nil {
			return err
		}
		if slices.Contains(t.Platforms[:i], p) {
			return Invalid(fmt.Sprintf("platforms[%d]", i), "platform %q is given twice", p)
		}
	}
	switch {
	case rt == RuntimeContainer && t.Image == nil:
		return Invalid("image", `a container template needs an image: {"ref": "registry/name:tag@sha256:..."} or {"artifact": "<artifact id>"}`)
	case rt == RuntimeProcess && t.Image != nil:
		return Invalid("image", `a process template runs on the node's own filesystem and takes no image; set "runtime": "container" to run one`)
	case t.Image == nil:
		return nil
	}
	return t.Image.Validate()
}

// Validate checks that exactly one form is given, and that it is well formed.
func (im Image) Validate() error {
	switch {
	case im.Ref == "" && im.Artifact == "":
		return Invalid("image", `image needs "ref" (an OCI image reference) or "artifact" (a sealed artifact holding an OCI image archive)`)
	case im.Ref != "" && im.Artifact != "":
		return Invalid("image", `image takes "ref" or "artifact", not both`)
	case im.Ref != "":
		if err := ValidateText("image.ref", im.Ref, 512); err != nil {
			return err
		}
		if _, err := name.ParseReference(im.Ref); err != nil {
			return Invalid("image.ref", "image.ref %q is not an OCI image reference (registry/name:tag or registry/name@sha256:<64 hex>): %v", im.Ref, err)
		}
	default:
		if err := ValidateText("image.artifact", im.Artifact, 100); err != nil {
			return err
		}
		if strings.ContainsAny(im.Artifact, " /#") {
			return Invalid("image.artifact", "image.artifact %q is not an artifact id", im.Artifact)
		}
	}
	return nil
}

// PlatformMatches reports whether a node of platform node may run an
// environment that asks for one of want (empty: any). A variant only has to
// agree when both name one: linux/arm64 runs linux/arm64/v8.
func PlatformMatches(want []string, node string) bool {
	if len(want) == 0 {
		return true
	}
	for _, w := range want {
		if w == node || platformBase(w) == node || w == platformBase(node) {
			return true
		}
	}
	return false
}

func platformBase(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 && strings.Count(p, "/") == 2 {
		return p[:i]
	}
	return p
}
