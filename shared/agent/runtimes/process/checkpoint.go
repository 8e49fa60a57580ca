package process

import (
	"context"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
)

// The process runtime's side of checkpoints (runtimes.Checkpointer): its
// folder is what it changed, and its cgroup is frozen while it is packed.

func (h *handle) CheckpointDir() string { return h.b.Root }

// Freeze freezes the environment's cgroup (cgroup v2's cgroup.freeze) and
// waits until every process of it is frozen. Without a cgroup (a node
// where the agent may not write one) nothing is frozen: each file is still
// packed whole and hashed as packed, but files written during the packing
// may be of different moments.
func (h *handle) Freeze(ctx context.Context) (func() error, string, error) {
	if h.b.Cgroup == "" {
		return func() error { return nil }, "not frozen (no cgroup)", nil
	}
	if err := confine.FreezeCgroup(ctx, h.b.Cgroup); err != nil {
		_ = confine.ThawCgroup(h.b.Cgroup)
		return nil, "", err
	}
	return func() error { return confine.ThawCgroup(h.b.Cgroup) }, "cgroup freezer (cgroup.freeze)", nil
}

var _ runtimes.Checkpointer = (*handle)(nil)
