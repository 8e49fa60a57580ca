//go:build linux

package process

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/envlease/envlease/shared/agent/confine"
)

// initMarker is argv[0] of an environment's init (package nsinit).
const initMarker = "envlease-nsinit\x00"

// killRooted sends SIGKILL to the process group of every process whose
// environment has ENVLEASE_ROOT set to one of roots, and says how many
// processes it matched and how many of them were environments' inits. An
// init killed takes every process of its PID namespace with it, and its
// namespaces go with the last of them: killRooted waits (up to 10 s) until
// no process of roots is left, so none is left when the agent serves.
func killRooted(roots map[string]bool) (matched, inits int) {
	seen := map[int]bool{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		found := 0
		for _, pid := range rootedProcesses(roots) {
			found++
			if !seen[pid] {
				seen[pid] = true
				matched++
				if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); bytes.HasPrefix(cmd, []byte(initMarker)) {
					inits++
				}
			}
			if pg, err := syscall.Getpgid(pid); err == nil && pg > 1 && pg != syscall.Getpgrp() {
				_ = syscall.Kill(-pg, syscall.SIGKILL)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if found == 0 || time.Now().After(deadline) {
			return matched, inits
		}
	}
}

// rootedProcesses lists the live processes (not zombies) whose
// ENVLEASE_ROOT is one of roots.
func rootedProcesses(roots map[string]bool) []int {
	self := os.Getpid()
	var out []int
	for _, pid := range confine.Pids() {
		if pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil || len(env) == 0 {
			continue // gone, or a zombie (whose environ reads empty)
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if root, ok := bytes.CutPrefix(kv, []byte("ENVLEASE_ROOT=")); ok && roots[string(root)] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
