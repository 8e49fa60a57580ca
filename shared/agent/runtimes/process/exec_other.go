//go:build !linux

package process

import (
	"context"
	"errors"

	"github.com/envlease/envlease/shared/agent/runtimes"
)

// Exec: commands inside an environment need Linux (runtimes.Execer).
func (h *handle) Exec(context.Context, runtimes.ExecSpec) (*runtimes.ExecProcess, error) {
	return nil, errors.New("running a command inside an environment needs a Linux node")
}
