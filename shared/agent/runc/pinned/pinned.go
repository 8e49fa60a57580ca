// Package pinned names the runc release the project builds and runs
// containers with, and where its build is installed. It imports nothing of
// the project, so the agent (which defaults to it) and the dev stack (which
// builds it) can both use it.
package pinned

import (
	"fmt"
	"os"
	"path/filepath"
)

// Module is runc's own Go module, a tool requirement of go.mod.
const Module = "github.com/opencontainers/runc"

// Version is go.mod's requirement of Module. The build refuses to run when
// the two differ, so moving to another release is `go get -tool
// github.com/opencontainers/runc@vX.Y.Z` and this constant, together.
const Version = "v1.5.3"

// Path is where the build of Version is installed:
// <user cache>/envlease/bin/runc-<Version> (for root, /root/.cache/…).
func Path() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("runc %s: locate the user cache folder: %w", Version, err)
	}
	return filepath.Join(cache, "envlease", "bin", "runc-"+Version), nil
}

// Installed is Path when an executable is there, "" otherwise.
func Installed() string {
	p, err := Path()
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}
