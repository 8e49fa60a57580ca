package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/agent/procstat"
	"github.com/envlease/envlease/shared/agent/runtimes"
)

// Sample reads what the environment uses. With a cgroup of its own (cgroup
// v2, the agent root) it reads the cgroup, which holds its exec sessions
// too; without, /proc of the tree of processes its command started (exec
// sessions, which are children of the agent, are not in it; a process
// that left the tree, by a double fork, neither).
func (h *handle) Sample(context.Context) (runtimes.Usage, error) {
	if h.p == nil {
		return runtimes.Usage{}, errors.New("not started")
	}
	disk := h.b.Disk.Used()
	var cg runtimes.Usage
	var cgErr error = errors.New("no cgroup")
	if h.b.Cgroup != "" {
		cg, cgErr = cgroupUsage(h.b.Cgroup)
		if cgErr == nil && cg.MemoryBytes >= 0 && cg.Processes >= 0 {
			cg.DiskBytes = disk
			return cg, nil
		}
	}
	// One read of /proc serves every environment of a sampling round.
	snap, err := procstat.Cached(time.Second)
	if err != nil {
		return runtimes.Usage{}, err
	}
	t, err := snap.Tree(h.p.cmd.Process.Pid)
	if err != nil {
		return runtimes.Usage{}, err
	}
	u := runtimes.Usage{CPUSeconds: t.CPUSeconds, MemoryBytes: t.RSSBytes, Processes: t.Processes, DiskBytes: disk,
		Source: "/proc (process tree)"}
	if cgErr == nil {
		// A cgroup v2 tree without the memory and pids controllers
		// enabled (a hybrid host) still counts CPU, exec sessions'
		// included.
		u.CPUSeconds, u.Source = cg.CPUSeconds, "cgroup v2 (cpu.stat), /proc (memory, processes)"
	}
	return u, nil
}

// cgroupUsage reads a cgroup v2 folder: cpu.stat's usage_usec,
// memory.current less its file cache (memory.stat's file), pids.current.
func cgroupUsage(dir string) (runtimes.Usage, error) {
	u := runtimes.Usage{Source: "cgroup v2"}
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return u, err
	}
	usec := field(string(stat), "usage_usec")
	if usec < 0 {
		return u, errors.New("cpu.stat has no usage_usec")
	}
	u.CPUSeconds = float64(usec) / 1e6
	// -1: the controller is not enabled for the cgroup.
	u.MemoryBytes, u.Processes = -1, -1
	if b, err := os.ReadFile(filepath.Join(dir, "memory.current")); err == nil {
		u.MemoryBytes, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if ms, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
			if file := field(string(ms), "file"); file > 0 && file < u.MemoryBytes {
				u.MemoryBytes -= file
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pids.current")); err == nil {
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		u.Processes = n
	}
	return u, nil
}

// field is the value of a "key value" line, -1 when absent.
func field(text, key string) int64 {
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

var _ runtimes.Sampler = (*handle)(nil)
