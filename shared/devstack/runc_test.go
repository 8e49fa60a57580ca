package devstack

import (
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/runc"
	"github.com/envlease/envlease/shared/agent/runc/pinned"
)

// go.mod's runc and the agent's are one release, and the build of it
// reports that release and passes the agent's own check.
func TestRuncPinIsGoMods(t *testing.T) {
	_, version, err := pinnedModule(pinned.Module)
	if err != nil {
		t.Fatal(err)
	}
	if version != pinned.Version {
		t.Fatalf("go.mod requires runc %s, shared/agent/runc/pinned says %s: move both together", version, pinned.Version)
	}
	line, err := RuncVersion(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if line != "runc version "+strings.TrimPrefix(pinned.Version, "v") {
		t.Fatalf("the build says %q", line)
	}
	if err := runc.CheckVersion(line); err != nil {
		t.Fatal(err)
	}
}
