package agent

import "runtime"

// platform is the node's os/arch as the service matches it against a
// template's platforms (linux/amd64, linux/arm64).
func platform() string { return runtime.GOOS + "/" + runtime.GOARCH }
