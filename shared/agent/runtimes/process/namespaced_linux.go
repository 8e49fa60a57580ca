//go:build linux

package process

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/nsinit"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// startNamespaced starts the command under an init of its own (nsinit) in
// new network, PID and mount namespaces, in the box's cgroup, as the box's
// user, with the template's resources, and returns once the command runs.
// With egressPort > 0 the environment's egress proxy listens there, on the
// loopback of its namespace, before the command starts.
func (rt *Runtime) startNamespaced(t domain.Template, b *confine.Box, cache, path, dir string, env []string, stdout, stderr *os.File, egressPort int) (*exec.Cmd, *confine.Net, error) {
	uid := -1
	if b.User != nil {
		uid = b.User.UID
	}
	limits, cpus, warns := resourceLimits(t.Resources, rt.cpuTurn())
	cfg := nsinit.Config{Path: path, Args: t.Command, Dir: dir, Env: env, UID: uid, GID: uid, Rlimits: limits, CPUs: cpus,
		Tmp: b.TmpMounts(), Keep: []string{b.Root}}
	if cache != "" {
		cfg.Keep = append(cfg.Keep, cache)
	}
	cfg.View = view(t, b)
	start := func(intoCgroup bool) (*nsinit.Cmd, error) {
		c, err := nsinit.Command(cfg)
		if err != nil {
			return nil, err
		}
		c.Stdout, c.Stderr = stdout, stderr
		// The init's own environment names the folder, so a restarted
		// agent finds (and kills) what a crashed one left.
		c.Env = []string{"ENVLEASE_ROOT=" + b.Root}
		if intoCgroup && b.Cgroup != "" {
			fd, err := unix.Open(b.Cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				c.Close()
				return nil, err
			}
			defer unix.Close(fd)
			c.SysProcAttr.UseCgroupFD, c.SysProcAttr.CgroupFD = true, fd
		}
		if err := c.Start(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	c, err := start(true)
	if err != nil && b.Cgroup != "" {
		// clone3 into a cgroup needs Linux 5.7: start it plainly and move
		// it before it starts the command (it waits for its configuration).
		if c, err = start(false); err == nil {
			if jerr := b.JoinCgroup(c.Process.Pid); jerr != nil {
				rt.cfg.Log.Warn("the environment runs outside its cgroup", "pid", c.Process.Pid, "err", jerr)
			}
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start %q in namespaces of its own: %w", t.Command[0], err)
	}
	h, err := netns.GetFromPid(c.Process.Pid)
	if err != nil {
		_ = c.Process.Kill()
		c.Close()
		_ = c.Wait()
		return nil, nil, fmt.Errorf("open the environment's network namespace: %w", err)
	}
	var egress confine.Egress
	switch {
	case egressPort > 0:
		ln, err := confine.ListenIn(h, egressPort)
		if err != nil {
			_ = c.Process.Kill()
			c.Close()
			_ = c.Wait()
			h.Close()
			return nil, nil, fmt.Errorf("open the egress proxy in the environment's network namespace: %w", err)
		}
		egress = confine.ServeEgress(ln, rt.cfg.Node.Guard, rt.cfg.Log.With("root", b.Root, "egressPort", egressPort))
	case t.Transparent():
		// The boundary is in place before the command starts: its first
		// packet already goes through it.
		if egress, err = rt.cfg.Node.OpenBoundary(h, t, filepath.Base(b.Root)); err == nil {
			err = writeCABundle(b, runtimes.CABundleFor(egress))
		}
		if err != nil {
			_ = c.Process.Kill()
			c.Close()
			_ = c.Wait()
			h.Close()
			if egress != nil {
				egress.Close()
			}
			return nil, nil, err
		}
	}
	more, err := c.Begin()
	if err != nil {
		_ = c.Process.Kill()
		c.Close()
		_ = c.Wait()
		h.Close()
		if egress != nil {
			egress.Close()
		}
		return nil, nil, err
	}
	if warns = append(warns, more...); len(warns) > 0 {
		rt.cfg.Log.Warn("the environment runs without part of its setup (resources, its view)", "pid", c.Process.Pid, "warnings", fmt.Sprint(warns))
	}
	return c.Cmd, confine.NewNet(h, c, egress), nil
}
