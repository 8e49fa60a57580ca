//go:build !linux

package agent

import (
	"errors"
	"io/fs"
	"os/exec"
)

// Outside Linux environments run as the agent's user: no cgroups, no
// /proc to find a user's processes by.
func canConfine() bool { return false }

func ownedBy(fs.FileInfo, int) bool { return false }

type uidPool struct{ r UIDRange }

func newUIDPool(UIDRange) (*uidPool, error) {
	return nil, errors.New("users of their own for environments need Linux")
}

func (*uidPool) take() (*envUser, error) { return nil, errors.New("no user ids outside Linux") }

func cgroupParent() (string, error) { return "", errNoCgroup }

func removeCgroup(string) error { return nil }

func (b *box) procAttr(cmd *exec.Cmd, _ bool) (func(), error) {
	setProcessGroup(cmd)
	return func() {}, nil
}

func (b *box) joinCgroup(int) error { return errNoCgroup }

func (b *box) endAll(cmd *exec.Cmd) error {
	killGroup(cmd, true)
	return nil
}

func unprivilegedPortStart() int { return 0 }

func (a *Agent) reclaimBoxes(map[string]bool) int { return 0 }
