//go:build linux

package confine

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ownCgroup finds the agent's own cgroup v2 folder: the cgroup2 mount (from
// /proc/self/mountinfo; /sys/fs/cgroup on most nodes, .../unified on hybrid
// ones) plus the agent's path in it (/proc/self/cgroup, line "0::").
func ownCgroup() (string, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	own := ""
	for _, line := range strings.Split(string(cg), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return "", errors.New("the agent is in no cgroup v2")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || g[0] != "cgroup2" {
			continue
		}
		mroot, mpoint := f[3], f[4]
		rel, ok := strings.CutPrefix(own, mroot)
		if !ok {
			continue
		}
		return filepath.Join(mpoint, rel), nil
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// CgroupParent is where environments' cgroups go, the agent's own cgroup,
// once a probe shows the agent may create one there with cgroup.kill.
func CgroupParent() (string, error) {
	dir, err := ownCgroup()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	probe := filepath.Join(dir, fmt.Sprintf("envlease-probe-%x", b))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return "", fmt.Errorf("%w: no cgroup.kill (Linux 5.14 or later has it)", ErrNoCgroup)
	}
	return dir, nil
}

// killCgroup kills every process of a cgroup (cgroup.kill) and waits until
// it is empty.
func killCgroup(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if bytes.Contains(ev, []byte("populated 0")) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the cgroup still has processes after cgroup.kill")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func removeCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
