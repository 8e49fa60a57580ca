//go:build !linux

package container

import (
	"context"
	"errors"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

var errNoContainers = errors.New("containers run on Linux only")

// Runtime is never made outside Linux.
type Runtime struct{}

// New says containers run on Linux only.
func New(Config) (*Runtime, error) { return nil, errNoContainers }

func (*Runtime) Name() string { return domain.RuntimeContainer }
func (*Runtime) Prepare(context.Context, runtimes.Env) (runtimes.Handle, error) {
	return nil, errNoContainers
}
func (*Runtime) Recover(context.Context) (int, error) { return 0, nil }
func (*Runtime) Describe() []any                      { return nil }
