//go:build linux

package process

import (
	"os"
	"strconv"
	"strings"
)

// unprivilegedPortStart is the lowest port a process without privileges may
// bind (net.ipv4.ip_unprivileged_port_start).
func unprivilegedPortStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 1024
	}
	return n
}
