// Package container is the runtime "container" behind the runtimes seam:
// the template's command in an OCI container under runc (the driver,
// package agent/container), from the template's image (package image).
package container

import (
	"log/slog"

	"github.com/envlease/envlease/shared/agent/buildcache"
	"github.com/envlease/envlease/shared/agent/confine"
)

// DefaultIDBase is the first id of the node that a container's user
// namespace maps its ids 0-65535 to: root in a container is this
// unprivileged id on the node. It lies above confine.DefaultUIDRange.
const DefaultIDBase = 1000000

// CachePath is where a container of a template with buildCache finds its
// build cache (also named by $ENVLEASE_CACHE); it stays writable when the
// root is read-only.
const CachePath = "/cache"

// Config is what the runtime is given of the node.
type Config struct {
	// Node is how the node confines environments; containers need its
	// users (root) and namespaces. NoNamespaces says why the node has no
	// namespaces, for the error that says containers need them.
	Node         *confine.Node
	NoNamespaces error
	// WorkDir holds the containers' folders (containers/).
	WorkDir string
	// Runc is the runc binary (default: the pinned release's build when
	// installed, else runc on PATH; one without the known escapes' fixes
	// is refused).
	Runc string
	// ImageCacheDir holds the unpacked images (default <WorkDir>/images),
	// ImageCacheBytes bounds them (default image.DefaultCacheBytes).
	ImageCacheDir   string
	ImageCacheBytes int64
	// RegistryCredentials is a Docker-style config file of registry
	// credentials for pulling images.
	RegistryCredentials string
	// IDBase is the first id of the node a container's user namespace maps
	// its 65536 ids to (default DefaultIDBase), which must not overlap
	// UIDs, the environments' user ids; NoUserNS runs containers without a
	// user namespace.
	IDBase   uint32
	NoUserNS bool
	UIDs     confine.UIDRange
	// BuildCache holds the build caches of templates with buildCache,
	// bound at CachePath.
	BuildCache *buildcache.Cache
	Log        *slog.Logger
}
