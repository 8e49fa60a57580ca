package devstack

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
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
	inodes, known := listeningInodes(port)
	if !known {
		return true
	}
	if holds(pid, inodes) {
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
		if pg, err := syscall.Getpgid(other); err == nil && pg == pid && holds(other, inodes) {
			return true
		}
	}
	return false
}

// holds reports whether process pid has a descriptor of one of the socket
// inodes.
func holds(pid int, inodes map[string]bool) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		l, err := os.Readlink(dir + fd.Name())
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(l, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true
		}
	}
	return false
}

// listeningInodes returns the inodes of the TCP sockets listening on port,
// from /proc/net/tcp and /proc/net/tcp6; known is false when neither can be
// read.
func listeningInodes(port int) (inodes map[string]bool, known bool) {
	out := map[string]bool{}
	want := fmt.Sprintf("%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		known = true
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			if _, p, ok := strings.Cut(fs[1], ":"); ok && p == want {
				out[fs[9]] = true
			}
		}
	}
	return out, known
}
