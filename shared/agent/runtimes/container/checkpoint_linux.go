package container

import (
	"context"

	"github.com/envlease/envlease/shared/agent/runtimes"
)

// The container runtime's side of checkpoints (runtimes.Checkpointer): its
// overlay upper layer is what it changed, and runc pauses it (its cgroup's
// freezer) while it is packed.

func (h *handle) CheckpointDir() string { return h.ctr.Upper }

func (h *handle) Freeze(ctx context.Context) (func() error, string, error) {
	if err := h.r.rc.Pause(ctx, h.id); err != nil {
		return nil, "", err
	}
	return func() error { return h.r.rc.Resume(context.WithoutCancel(ctx), h.id) }, "runc pause", nil
}

var _ runtimes.Checkpointer = (*handle)(nil)
