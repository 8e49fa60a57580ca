//go:build !linux

package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"

	"github.com/envlease/envlease/shared/domain"
)

var (
	errNoNamespaces = errors.New("namespaces are a Linux feature")
	errEnded        = errors.New("the environment has ended")
)

func probeNamespaces() error { return errNoNamespaces }

// envNet is never made outside Linux.
type envNet struct{}

func (a *Agent) startNamespaced(domain.Template, *box, string, string, []string, *os.File, *os.File, int) (*exec.Cmd, *envNet, error) {
	return nil, nil, errNoNamespaces
}

func (*envNet) ended() string { return "" }

func (*envNet) dial(context.Context, int) (net.Conn, error) { return nil, errNoNamespaces }
