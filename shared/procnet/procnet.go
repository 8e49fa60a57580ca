// Package procnet finds who holds a listening TCP socket, from what Linux
// shows under /proc: the socket's inode in /proc/net/tcp and tcp6, then the
// processes with a descriptor of it. A port found free and handed to a child
// may be taken by another program before the child binds it; an answer on
// the port proves only that something listens there, and this tells whose.
package procnet

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Listening returns the inodes of the TCP sockets (IPv4 and IPv6) listening
// on port; known is false when neither table can be read (no /proc), and
// then the caller cannot tell who listens.
func Listening(port int) (inodes map[string]bool, known bool) {
	inodes = map[string]bool{}
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
				inodes[fs[9]] = true
			}
		}
	}
	return inodes, known
}

// Holds reports whether process pid has a descriptor of one of the socket
// inodes (false for a process that is gone or not readable).
func Holds(pid int, inodes map[string]bool) bool {
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
