package container

import (
	"context"

	"github.com/envlease/envlease/shared/agent/runtimes"
)

// Sample reads the container's cgroup through runc (runc events --stats):
// CPU time, memory in use (less its page cache where runc says it) and
// pids; its disk when it has one of its own.
func (h *handle) Sample(ctx context.Context) (runtimes.Usage, error) {
	st, err := h.r.rc.Stats(ctx, h.id)
	if err != nil {
		return runtimes.Usage{}, err
	}
	mem := int64(st.Memory.Usage.Usage)
	if cache := int64(st.Memory.Cache); cache > 0 && cache < mem {
		mem -= cache
	}
	return runtimes.Usage{
		CPUSeconds: float64(st.Cpu.Usage.Total) / 1e9, MemoryBytes: mem, Processes: int(st.Pids.Current),
		DiskBytes: h.ctr.Disk.Used(), Source: "runc events (cgroup)",
	}, nil
}

var _ runtimes.Sampler = (*handle)(nil)
