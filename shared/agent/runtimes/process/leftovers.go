package process

import (
	"os"
	"path/filepath"

	"github.com/envlease/envlease/shared/agent/confine"
)

// reclaim clears what an earlier run of the agent left in its work dir:
// after a crash (or SIGKILL) the processes it started live on in their own
// process groups, holding ports and memory, while the control plane fails
// their environments once the old node is lost. Every folder under envs/ is
// such a leftover, since the agent holds the work dir's lock (lockWorkDir).
// Processes are recognised by ENVLEASE_ROOT naming one of those folders
// (Linux: /proc; elsewhere none are found) and killed with their group;
// as root, every process of a folder's owner (an id of the range no agent
// holds now) is killed too, and a cgroup of the folder's name under the
// agent's is emptied and removed. An environment that ran in namespaces of
// its own is found by its init's ENVLEASE_ROOT: killing the init ends its
// PID namespace, and its network and mount namespaces go with the last of
// its processes (nothing of them is kept on disk). Then the folders are
// removed. It says how many folders it found.
func (rt *Runtime) reclaim() int {
	envs := filepath.Join(rt.cfg.WorkDir, "envs")
	entries, err := os.ReadDir(envs)
	if err != nil || len(entries) == 0 {
		return 0
	}
	roots := map[string]bool{}
	for _, e := range entries {
		roots[filepath.Join(envs, e.Name())] = true
	}
	killed, inits := killRooted(roots)
	killed += rt.cfg.Node.ReclaimBoxes(roots)
	for r := range roots {
		// A folder that is a disk's mount point is unmounted first (at
		// once, whatever it holds), and the disk's image removed.
		img := ""
		if d := rt.cfg.Node.Disks; d != nil {
			img = filepath.Join(d.Dir, filepath.Base(r)+".img")
		}
		if err := confine.RemoveDisk(r, img); err != nil {
			rt.cfg.Log.Warn("an earlier environment's disk is not removed", "root", r, "err", err)
		}
		_ = os.RemoveAll(r)
	}
	rt.cfg.Log.Warn("cleared what an earlier run of the agent left", "folders", len(roots), "processes", killed, "namespaced", inits)
	return len(roots)
}
