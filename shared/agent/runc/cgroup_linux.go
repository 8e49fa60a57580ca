package runc

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroupDirs says where runc puts a container whose cgroupsPath is rel
// (relative): beneath the agent's own cgroup of each hierarchy, as runc
// resolves a relative path against the cgroups of its caller. On cgroup v1
// that is one folder per controller hierarchy; on v2 one folder.
func cgroupDirs(rel string) ([]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	unified := false
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		unified = true
	}
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, own := parts[1], parts[2]
		var base string
		switch {
		case ctrls == "" && unified:
			base = cgroupRoot
		case ctrls == "":
			base = filepath.Join(cgroupRoot, "unified")
		default:
			name := strings.TrimPrefix(ctrls, "name=")
			base = filepath.Join(cgroupRoot, name)
			if _, err := os.Stat(base); err != nil {
				// Joint hierarchies mounted under one controller's name.
				base = filepath.Join(cgroupRoot, strings.TrimPrefix(strings.Split(ctrls, ",")[0], "name="))
			}
		}
		if _, err := os.Stat(base); err != nil {
			continue
		}
		dirs = append(dirs, filepath.Join(base, own, rel))
	}
	return dirs, sc.Err()
}

// oomKilled says whether the kernel's OOM killer killed a process of the
// cgroup (memory.oom_control on v1, memory.events on v2).
func oomKilled(dirs []string) bool {
	for _, d := range dirs {
		for _, f := range []string{"memory.oom_control", "memory.events"} {
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
					if n, _ := strconv.Atoi(strings.TrimSpace(v)); n > 0 {
						return true
					}
				}
			}
		}
	}
	return false
}

// removeCgroups kills what is left in the container's cgroup folders and
// removes them, children first. runc delete does this for a container it
// knows; this is for what a crash left between the steps.
func removeCgroups(dirs []string, timeout time.Duration) error {
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var sub []string
		_ = filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				sub = append(sub, p)
			}
			return nil
		})
		for i := len(sub) - 1; i >= 0; i-- {
			if err := emptyCgroup(sub[i], timeout); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := os.Remove(sub[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// emptyCgroup kills the processes of one cgroup folder until none is left.
func emptyCgroup(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return errors.New("cgroup " + dir + " still has processes " + strings.Join(pids, " "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
