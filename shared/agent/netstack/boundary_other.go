//go:build !linux

package netstack

import (
	"errors"

	"github.com/vishvananda/netns"
)

var errNotLinux = errors.New("the network boundary needs Linux (TUN devices and network namespaces)")

// Probe says whether boundaries can be made here: never off Linux.
func Probe() error { return errNotLinux }

// Open is not available off Linux.
func Open(netns.NsHandle, Config) (*Boundary, error) { return nil, errNotLinux }
