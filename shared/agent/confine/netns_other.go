//go:build !linux

package confine

import (
	"context"
	"errors"
	"net"
)

var (
	errNoNamespaces = errors.New("namespaces are a Linux feature")
	ErrEnded        = errors.New("the environment has ended")
)

func ProbeNamespaces() error { return errNoNamespaces }

// Net is never made outside Linux.
type Net struct{}

func (*Net) Ended() string { return "" }

func (*Net) Dial(context.Context, int) (net.Conn, error) { return nil, errNoNamespaces }
