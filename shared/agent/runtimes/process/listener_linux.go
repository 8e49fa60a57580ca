//go:build linux

package process

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/procnet"
)

// listenerIsOurs reports whether the socket listening on port belongs to the
// environment: a connection that is accepted proves only that something
// listens there, and a port the agent found free may have been taken by
// another program before the command bound it. The holders are found from
// /proc (the listening socket's inode, then the processes with a descriptor
// of it); a holder is the environment's when it is the command, in its
// process group, runs as the environment's own user, or carries its
// ENVLEASE_ROOT. When /proc says nothing about the socket, the connection
// stands.
func (p *proc) listenerIsOurs(port int) bool {
	inodes, _ := procnet.Listening(port)
	if len(inodes) == 0 {
		return true
	}
	holders := socketHolders(inodes)
	if len(holders) == 0 {
		return true
	}
	main := p.cmd.Process.Pid
	for _, pid := range holders {
		if pid == main {
			return true
		}
		if pg, err := syscall.Getpgid(pid); err == nil && pg == main {
			return true
		}
		if p.box != nil && p.box.User != nil {
			if confine.RunsAs(pid, p.box.User.UID) {
				return true
			}
		}
		if env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil &&
			bytes.Contains(env, []byte("\x00ENVLEASE_ROOT="+p.root+"\x00")) {
			return true
		}
	}
	return false
}

// socketHolders returns the processes that hold a descriptor of one of the
// socket inodes.
func socketHolders(inodes map[string]bool) []int {
	var out []int
	for _, pid := range confine.Pids() {
		if procnet.Holds(pid, inodes) {
			out = append(out, pid)
		}
	}
	return out
}
