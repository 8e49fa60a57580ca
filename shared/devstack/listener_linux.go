package devstack

import (
	"os"
	"strconv"
	"syscall"

	"github.com/envlease/envlease/shared/procnet"
)

// listensOn reports whether the socket listening on TCP port (IPv4 or IPv6)
// is held by process pid or by a process of its group (a child started with
// childSysProcAttr leads its own group: a launcher that forks its server
// counts), as /proc shows it. A child is given a port found free, which
// another program can take before the child binds it; an answer on the port
// then proves only that something listens there. A child that has exited
// holds nothing. Only where /proc/net cannot be read does it report true:
// the answer stands.
func listensOn(pid, port int) bool {
	inodes, known := procnet.Listening(port)
	if !known {
		return true
	}
	if procnet.Holds(pid, inodes) {
		return true
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, p := range procs {
		other, err := strconv.Atoi(p.Name())
		if err != nil || other == pid {
			continue
		}
		if pg, err := syscall.Getpgid(other); err == nil && pg == pid && procnet.Holds(other, inodes) {
			return true
		}
	}
	return false
}
