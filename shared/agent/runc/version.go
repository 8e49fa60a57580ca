package runc

import (
	"fmt"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/envlease/envlease/shared/agent/runc/pinned"
)

// firstFixed is, for each runc release series that has them, the first
// release with the fixes of the container escapes CVE-2025-31133,
// CVE-2025-52565 and CVE-2025-52881 (masked paths and /dev/console mount
// races). Series after the last one listed have them from their start;
// series before the first one (1.1 and older) never got them upstream.
// CVE-2024-21626 (a leaked working directory) was fixed in 1.1.12, before
// every release listed here.
var firstFixed = map[string]string{
	"v1.2": "v1.2.8",
	"v1.3": "v1.3.3",
	"v1.4": "v1.4.0-rc.3",
}

// CheckVersion refuses a runc without the fixes of the known container
// escapes, from the first line of its `runc --version` ("runc version
// 1.1.5+ds1"). Members' images run under it, so a node never offers
// containers on one: the agent says why and how to install the pinned one.
func CheckVersion(line string) error {
	raw := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "runc version"))
	v := "v" + raw
	if raw == "" || !semver.IsValid(v) {
		return fmt.Errorf("runc says %q, not a version: cannot tell whether it has the fixes of the known container escapes; use the pinned runc %s (go run ./shared/devstack/cmd/runc)", line, pinned.Version)
	}
	series := semver.MajorMinor(v)
	ok := semver.Compare(series, "v1.4") > 0
	if first, listed := firstFixed[series]; listed {
		ok = semver.Compare(v, first) >= 0
	}
	if !ok {
		return fmt.Errorf("runc %s lacks the fixes of the container escapes CVE-2025-31133, CVE-2025-52565 and CVE-2025-52881 (fixed in 1.2.8, 1.3.3 and 1.4.0): "+
			"install the pinned runc %s (go run ./shared/devstack/cmd/runc) or name a fixed one with -runc", raw, pinned.Version)
	}
	return nil
}
