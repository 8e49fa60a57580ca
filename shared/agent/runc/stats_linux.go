package runc

import (
	"context"

	gorunc "github.com/containerd/go-runc"
)

// Stats reads what a container uses now (runc events --stats, from its
// cgroup): CPU, memory and pids.
func (r *Runtime) Stats(ctx context.Context, id string) (*gorunc.Stats, error) {
	return r.runc("").Stats(ctx, id)
}
