package devstack

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/envlease/envlease/shared/agent/runc/pinned"
)

// RuncBinary returns the path of the runc release pinned in go.mod (a tool
// requirement; pinned.Version names the same one), building runc's own
// command from its module into pinned.Path() the first time, as
// VersityGWBinary does for versitygw: once per machine, under a lock.
//
// runc links its nsexec C code with cgo, so the build needs a C compiler. It
// is built without the seccomp tag: the agent's containers carry no seccomp
// profile (docs/security.md says why), and the tag would make every machine
// that builds runc install libseccomp-dev for nothing.
func RuncBinary(ctx context.Context, progress io.Writer) (string, error) {
	root, version, err := pinnedModule(pinned.Module)
	if err != nil {
		return "", err
	}
	if version != pinned.Version {
		return "", fmt.Errorf("devstack: go.mod requires runc %s but the agent runs %s (shared/agent/runc/pinned): move both together", version, pinned.Version)
	}
	bin, err := pinned.Path()
	if err != nil {
		return "", err
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		if _, cerr := exec.LookPath("cc"); cerr != nil {
			return "", fmt.Errorf("devstack: building runc %s needs a C compiler for cgo (apt-get install gcc libc6-dev): %w", version, err)
		}
	}
	return buildPinned(ctx, progress, pinnedTool{name: "runc", version: version, pkg: pinned.Module, root: root, bin: bin,
		env: []string{"CGO_ENABLED=1"}})
}

// RuncVersion builds the pinned runc if needed and returns what it says of
// itself (`runc --version`, first line: "runc version 1.5.3").
func RuncVersion(ctx context.Context, progress io.Writer) (string, error) {
	bin, err := RuncBinary(ctx, progress)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("devstack: %s --version: %w", bin, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first), nil
}
