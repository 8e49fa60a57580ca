//go:build !linux

package confine

import (
	"context"
	"errors"
)

// FreezeCgroup: cgroups are Linux's.
func FreezeCgroup(context.Context, string) error { return errors.New("cgroups are Linux's") }

// ThawCgroup: nothing was frozen.
func ThawCgroup(string) error { return nil }
