//go:build !linux

package process

import (
	"errors"
	"os"
	"os/exec"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/domain"
)

func (rt *Runtime) startNamespaced(domain.Template, *confine.Box, string, string, string, []string, *os.File, *os.File, int) (*exec.Cmd, *confine.Net, error) {
	return nil, nil, errors.New("namespaces are a Linux feature")
}
