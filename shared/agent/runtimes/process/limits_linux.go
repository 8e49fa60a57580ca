//go:build linux

package process

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/agent/nsinit"
	"github.com/envlease/envlease/shared/bytesize"
	"github.com/envlease/envlease/shared/domain"
)

// applyResources applies a template's resources to a started process, best
// effort, and says what it could not apply:
//
//   - memory: RLIMIT_AS (address space), so allocations beyond it fail. It
//     bounds virtual memory, not resident memory: runtimes that reserve large
//     address ranges up front (Go, the JVM) need a generous figure.
//   - pids: RLIMIT_NPROC. Linux counts it per user, not per process tree.
//     When the agent is root each environment has a user of its own, so it
//     bounds the environment's processes; otherwise every process of the
//     agent's user counts.
//   - cpus: CPU affinity to that many of the agent's CPUs (taken in turns so
//     environments spread out); a share of CPU time would need cgroups.
//
// Here, for environments outside namespaces of their own, the limits are
// set with prlimit(2) right after the process starts, so the first
// instructions of the command (before it forks or allocates) run
// unlimited; children it forks afterwards inherit them. In namespaces the
// init sets them before the exec (nsinit), so they hold from the first
// instruction.
func applyResources(pid int, r domain.Resources, turn int) []string {
	limits, cpus, warns := resourceLimits(r, turn)
	for _, l := range limits {
		if err := unix.Prlimit(pid, l.Resource, &unix.Rlimit{Cur: l.Max, Max: l.Max}, nil); err != nil {
			warns = append(warns, fmt.Sprintf("%s limit: %v", limitName(l.Resource), err))
		}
	}
	if len(cpus) > 0 {
		var set unix.CPUSet
		for _, c := range cpus {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(pid, &set); err != nil {
			warns = append(warns, fmt.Sprintf("cpus: %v", err))
		}
	}
	return warns
}

func limitName(resource int) string {
	if resource == unix.RLIMIT_AS {
		return "memory"
	}
	return "pids"
}

// resourceLimits turns a template's resources into the rlimits and the CPU
// set applyResources applies (an environment's init applies the same inside
// its namespaces), and says what it could not read.
func resourceLimits(r domain.Resources, turn int) ([]nsinit.Rlimit, []int, []string) {
	var (
		limits []nsinit.Rlimit
		warns  []string
	)
	if r.Memory != "" {
		n, err := bytesize.Parse(r.Memory)
		if err != nil {
			warns = append(warns, fmt.Sprintf("memory %q: %v", r.Memory, err))
		} else {
			limits = append(limits, nsinit.Rlimit{Resource: unix.RLIMIT_AS, Max: n})
		}
	}
	if r.PIDs > 0 {
		limits = append(limits, nsinit.Rlimit{Resource: unix.RLIMIT_NPROC, Max: uint64(r.PIDs)})
	}
	if r.CPUs <= 0 {
		return limits, nil, warns
	}
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		return limits, nil, append(warns, fmt.Sprintf("cpus: %v", err))
	}
	var cpus []int
	for i := 0; i < 1024; i++ {
		if mine.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if r.CPUs >= len(cpus) {
		return limits, nil, warns
	}
	set := make([]int, r.CPUs)
	for i := range set {
		set[i] = cpus[(turn+i)%len(cpus)]
	}
	return limits, set, warns
}
