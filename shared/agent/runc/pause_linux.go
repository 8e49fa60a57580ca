package runc

import "context"

// Pause freezes every process of a container (runc pause: its cgroup's
// freezer), as a checkpoint packs its files.
func (r *Runtime) Pause(ctx context.Context, id string) error { return r.runc("").Pause(ctx, id) }

// Resume thaws a paused container (runc resume).
func (r *Runtime) Resume(ctx context.Context, id string) error { return r.runc("").Resume(ctx, id) }
