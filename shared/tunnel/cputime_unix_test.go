//go:build unix

package tunnel_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the process has used so far:
// the benchmark's client, agent and target all run in it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
