package agent

import (
	"runtime"

	"github.com/envlease/envlease/shared/domain"
)

// platform is the node's os/arch as the service matches it against a
// template's platforms (linux/amd64, linux/arm64).
func platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// runtimes are the runtimes the node registers as offering: the configured
// ones, or process alone.
func (a *Agent) runtimes() []string {
	if len(a.cfg.Runtimes) == 0 {
		return []string{domain.RuntimeProcess}
	}
	return a.cfg.Runtimes
}
