//go:build !linux

package confine

import (
	"context"
	"errors"
)

// Disk is one environment's filesystem; outside Linux there are none.
type Disk struct {
	Image, Mount string
	Size         DiskSize
}

func NewDisks(string, uint64, uint64) (*Disks, error) {
	return nil, errors.New("environments' disks need Linux")
}

func (d *Disks) Make(context.Context, string, string, DiskSize, *[2]int) (*Disk, error) {
	return nil, errors.New("environments' disks need Linux")
}

func (d *Disk) Full() string  { return "" }
func (d *Disk) Used() int64   { return -1 }
func (d *Disk) Remove() error { return nil }

func RemoveDisk(string, string) error { return nil }

func (d *Disk) moveTo(string, string) error { return errors.New("environments' disks need Linux") }

func (d *Disks) RemoveLeftDisks(func(string) bool) int { return 0 }

// RemoveLeftovers finds nothing outside Linux.
func RemoveLeftovers(int) int { return 0 }
