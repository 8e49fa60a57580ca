// Package envfs does the file operations of an environment's files
// endpoint (docs/files.md) inside the environment's root on the node:
// every path resolved by the kernel within the root (openat2), every
// change made as the environment's user and only below the paths it may
// write. It returns *envfiles.Error for everything it refuses.
package envfs

import (
	"path"
	"strings"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/envfiles"
)

// Root is one environment's files as the node holds them.
type Root struct {
	// Dir is the node's folder at which the environment's absolute paths
	// begin (runtimes.Files.Root).
	Dir string
	// Home is the working folder, relative to Dir, that relative paths
	// start at ("" for Dir).
	Home string
	// InRoot resolves absolute symbolic links at Dir, as the environment
	// sees them (a container's own root); without it such a link, which
	// the environment would follow on the node, is refused.
	InRoot bool
	// UID and GID are the environment's user as the node sees it; AsUser
	// says whether changes are made as that user (the agent runs as root).
	UID, GID int
	AsUser   bool
	// Writable are the absolute paths below which the environment may
	// change files; nil: everywhere.
	Writable []string
	// Tmp, when set, is the folder (relative to Dir) that the environment
	// sees as /tmp and /var/tmp.
	Tmp string
	// Hidden are absolute paths that are not the environment's files as
	// it sees them (mounted over inside it): refused.
	Hidden []string
	// Scope is the absolute, clean path a request may reach (a ticket's
	// path), checked where the kernel resolved each path, so no link
	// below it leads elsewhere in the root; "" or "/": everything.
	Scope string
}

// special are the kernel's views at the root of an environment: never
// its files.
var special = []string{"/proc", "/sys", "/dev"}

// Clean checks a requested path and returns it absolute (from the root)
// and cleaned. Relative paths begin at Home.
func (r Root) Clean(p string) (string, error) {
	switch {
	case p == "":
		return "", envfiles.Errorf(envfiles.ReasonBadPath, "the path is empty: name a file, or / for the environment's root")
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return "", envfiles.Errorf(envfiles.ReasonBadPath, "a path must be UTF-8 without NUL bytes")
	case len(p) > 4096:
		return "", envfiles.Errorf(envfiles.ReasonBadPath, "a path has at most 4096 bytes")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", envfiles.Errorf(envfiles.ReasonOutsideRoot, "%s: a path cannot hold ..: name what is inside the environment", p)
		}
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + r.Home + "/" + p
	}
	c := path.Clean(p)
	for _, s := range special {
		if under(c, s) {
			return "", envfiles.Errorf(envfiles.ReasonSpecialPath, "%s is the kernel's view, not a file of the environment", s)
		}
	}
	for _, h := range r.Hidden {
		if under(c, h) {
			return "", envfiles.Errorf(envfiles.ReasonSpecialPath, "%s is mounted over inside the environment: its files are not reached from outside", h)
		}
	}
	return c, nil
}

// Within reports whether p (absolute, clean) is at or below base.
func Within(p, base string) bool { return under(p, base) }

func under(p, base string) bool {
	if base == "/" {
		return true
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// writable reports whether a change in the folder at abs (absolute in the
// environment, as the kernel resolved it) is allowed.
func (r Root) writable(abs string) bool {
	if r.Writable == nil {
		return true
	}
	for _, w := range r.Writable {
		if under(abs, w) {
			return true
		}
	}
	return false
}
