package agent

import "context"

// The process runtime's side of checkpoints (checkpoint.go): its folder is
// what it changed, and its cgroup is frozen while it is packed.

func (h *procHandle) CheckpointDir() string { return h.b.root }

// Freeze freezes the environment's cgroup (cgroup v2's cgroup.freeze) and
// waits until every process of it is frozen. Without a cgroup (a node
// where the agent may not write one) nothing is frozen: each file is still
// packed whole and hashed as packed, but files written during the packing
// may be of different moments.
func (h *procHandle) Freeze(ctx context.Context) (func() error, string, error) {
	if h.b.cgroup == "" {
		return func() error { return nil }, "not frozen (no cgroup)", nil
	}
	if err := freezeCgroup(ctx, h.b.cgroup); err != nil {
		_ = thawCgroup(h.b.cgroup)
		return nil, "", err
	}
	return func() error { return thawCgroup(h.b.cgroup) }, "cgroup freezer (cgroup.freeze)", nil
}
