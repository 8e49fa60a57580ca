//go:build linux

package process

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/envlease/envlease/shared/agent/confine"
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
	inodes := listeningInodes(port)
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

// listeningInodes returns the inodes of the TCP sockets listening on port
// (IPv4 and IPv6), from /proc/net/tcp and /proc/net/tcp6.
func listeningInodes(port int) map[string]bool {
	out := map[string]bool{}
	want := strings.ToUpper(strconv.FormatInt(int64(port), 16))
	for len(want) < 4 {
		want = "0" + want
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan() // header
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
	return out
}

// socketHolders returns the processes that hold a descriptor of one of the
// socket inodes.
func socketHolders(inodes map[string]bool) []int {
	var out []int
	for _, pid := range confine.Pids() {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(dir + fd.Name())
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
