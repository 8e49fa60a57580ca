package agent

import (
	"context"
	"path/filepath"
)

// The container runtime's side of checkpoints (checkpoint.go): its overlay
// upper layer is what it changed, and runc pauses it while it is packed.

func (h *ctrHandle) CheckpointDir() string { return filepath.Join(h.ctr.Dir, "upper") }

func (h *ctrHandle) Freeze(ctx context.Context) (func() error, string, error) {
	if err := h.r.rc.Pause(ctx, h.id); err != nil {
		return nil, "", err
	}
	return func() error { return h.r.rc.Resume(context.WithoutCancel(ctx), h.id) }, "runc pause", nil
}
