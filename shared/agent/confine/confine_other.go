//go:build !linux

package confine

import (
	"errors"
	"io/fs"
	"os/exec"
)

// Outside Linux environments run as the agent's user: no cgroups, no
// /proc to find a user's processes by.
func CanConfine() bool { return false }

func OwnedBy(fs.FileInfo, int) bool { return false }

type UIDPool struct{ r UIDRange }

func NewUIDPool(UIDRange) (*UIDPool, error) {
	return nil, errors.New("users of their own for environments need Linux")
}

func (*UIDPool) Take() (*User, error) { return nil, errors.New("no user ids outside Linux") }

func CgroupParent() (string, error) { return "", ErrNoCgroup }

func removeCgroup(string) error { return nil }

func (b *Box) ProcAttr(cmd *exec.Cmd, _ bool) (func(), error) {
	SetProcessGroup(cmd)
	return func() {}, nil
}

func (b *Box) JoinCgroup(int) error { return ErrNoCgroup }

func (b *Box) EndAll(cmd *exec.Cmd) error {
	KillGroup(cmd, true)
	return nil
}

func (n *Node) ReclaimBoxes(map[string]bool) int { return 0 }
