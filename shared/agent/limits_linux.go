//go:build linux

package agent

import (
	"fmt"

	"golang.org/x/sys/unix"

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
// The limits are set with prlimit(2) right after the process starts, so the
// first instructions of the command (before it forks or allocates) run
// unlimited; children it forks afterwards inherit them.
func applyResources(pid int, r domain.Resources, turn int) []string {
	var warns []string
	if r.Memory != "" {
		n, err := parseSize(r.Memory)
		if err != nil {
			warns = append(warns, fmt.Sprintf("memory %q: %v", r.Memory, err))
		} else if err := unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
			warns = append(warns, fmt.Sprintf("memory limit: %v", err))
		}
	}
	if r.PIDs > 0 {
		n := uint64(r.PIDs)
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
			warns = append(warns, fmt.Sprintf("pids limit: %v", err))
		}
	}
	if r.CPUs > 0 {
		var mine unix.CPUSet
		if err := unix.SchedGetaffinity(0, &mine); err != nil {
			return append(warns, fmt.Sprintf("cpus: %v", err))
		}
		var cpus []int
		for i := 0; i < 1024; i++ {
			if mine.IsSet(i) {
				cpus = append(cpus, i)
			}
		}
		if r.CPUs < len(cpus) {
			var set unix.CPUSet
			for i := 0; i < r.CPUs; i++ {
				set.Set(cpus[(turn+i)%len(cpus)])
			}
			if err := unix.SchedSetaffinity(pid, &set); err != nil {
				warns = append(warns, fmt.Sprintf("cpus: %v", err))
			}
		}
	}
	return warns
}
