package runtimes

import "context"

// Sampler is what a Handle implements when it can say what its environment
// uses now (docs/environments.md, "Metrics"): the agent samples it every
// few seconds, for CPU activity (docs/environments.md, "When an
// environment is idle") and for metrics.
type Sampler interface {
	Sample(ctx context.Context) (Usage, error)
}

// Usage is what an environment uses at one moment.
type Usage struct {
	// CPUSeconds is the CPU time its processes used so far (a counter).
	CPUSeconds float64
	// MemoryBytes is the memory it holds now.
	MemoryBytes int64
	// Processes counts its processes now.
	Processes int
	// DiskBytes is what it wrote to its disk, -1 when not measured (no disk
	// of its own).
	DiskBytes int64
	// Source says where the numbers were read: "cgroup v2", "runc events
	// (cgroup)", "/proc (process tree)".
	Source string
}
