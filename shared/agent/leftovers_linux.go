//go:build linux

package agent

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// killRooted sends SIGKILL to the process group of every process whose
// environment has ENVLEASE_ROOT set to one of roots, and says how many
// processes it matched.
func killRooted(roots map[string]bool) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self, own := os.Getpid(), syscall.Getpgrp()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if root, ok := bytes.CutPrefix(kv, []byte("ENVLEASE_ROOT=")); ok && roots[string(root)] {
				n++
				if pg, err := syscall.Getpgid(pid); err == nil && pg > 1 && pg != own {
					_ = syscall.Kill(-pg, syscall.SIGKILL)
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
	return n
}
