//go:build !linux

package agent

import (
	"context"
	"errors"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// RuntimeContainer runs the template's command in an OCI container under
// runc: a Linux runtime.
const RuntimeContainer = domain.RuntimeContainer

// DefaultContainerIDBase: see the Linux build.
const DefaultContainerIDBase = 1000000

var errNoContainers = errors.New("containers run on Linux only")

// containerRuntime is never made outside Linux.
type containerRuntime struct{}

func (a *Agent) newContainerRuntime() (*containerRuntime, error) { return nil, errNoContainers }

func (*containerRuntime) Name() string { return RuntimeContainer }
func (*containerRuntime) Prepare(context.Context, runtimes.Env) (runtimes.Handle, error) {
	return nil, errNoContainers
}
func (*containerRuntime) Recover(context.Context) (int, error) { return 0, nil }
