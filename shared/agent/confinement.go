package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/bytesize"
)

// setupConfinement decides how environments are held apart on this node:
// as root, users of their own (from cfg.UIDs) reaching their folders
// through envs/; wherever the agent may write a cgroup v2 tree, a cgroup
// each (docs/nodes.md, "Confinement", says what that covers).
func (a *Agent) setupConfinement() error {
	if a.cfg.UIDs == (UIDRange{}) {
		a.cfg.UIDs = DefaultUIDRange
	}
	if err := a.cfg.UIDs.Check(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	n := &confine.Node{Guard: confine.NewEgressGuard(a.cfg.egressAllow), KeepRoots: a.cfg.KeepRoots, Log: a.log}
	a.confinement = n
	if confine.CanConfine() && !a.cfg.assumeNotRoot {
		users, err := confine.NewUIDPool(a.cfg.UIDs)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		n.Users = users
		if err := a.searchableByOthers(); err != nil {
			return err
		}
		if a.cfg.noNamespaces {
			a.noNamespaces = errors.New("turned off")
		} else {
			a.noNamespaces = confine.ProbeNamespaces()
		}
		if n.Disks, err = confine.NewDisks(filepath.Join(a.cfg.WorkDir, "disks"), a.cfg.DiskDefault, a.cfg.DiskMax); err != nil {
			if !a.cfg.AllowUnboundedDisk {
				return fmt.Errorf("agent: environments cannot have disks of their own on this node (%v), so each could fill the node's disk; install e2fsprogs and give the agent loop devices, or accept that with -allow-unbounded-disk (Config.AllowUnboundedDisk)", err)
			}
			a.log.Warn("environments write to the node's disk unbounded: each can fill it for all", "err", err)
			n.Disks = nil
		}
		if a.cfg.PreparedBoxes >= 0 {
			var size confine.DiskSize
			if n.Disks != nil {
				if size, err = n.Disks.Size(""); err != nil {
					return fmt.Errorf("agent: %w", err)
				}
			}
			max := a.cfg.PreparedBoxes
			if max == 0 {
				max = confine.DefaultPreparedBoxes
			}
			n.Prepare(filepath.Join(a.cfg.WorkDir, "prepared"), size, max)
		}
		if a.noNamespaces == nil {
			n.Namespaces = true
			a.setupBoundaries(n)
		} else if !a.cfg.AllowSharedNetwork {
			return fmt.Errorf("agent: environments cannot run in namespaces of their own on this node (%v), so each would reach the node's addresses, its loopback and the other environments, and see every process; give the agent the privilege to make namespaces, or accept that with -allow-shared-network (Config.AllowSharedNetwork)", a.noNamespaces)
		}
	} else {
		a.noNamespaces = errors.New("the agent does not run as root")
	}
	if a.cfg.noCgroups {
		a.noCgroup = fmt.Errorf("%w: turned off", confine.ErrNoCgroup)
	} else {
		n.Cgroups, a.noCgroup = confine.CgroupParent()
	}
	return nil
}

// logConfinement says at start how environments are held apart, and when
// the agent is not root, in one warning, what is then not confined.
func (a *Agent) logConfinement() {
	if a.confinement.Users != nil {
		stop := "cgroup.kill of its cgroup under " + a.confinement.Cgroups + ", then every process of its user"
		if a.confinement.Cgroups == "" {
			stop = "every process of its user, found in /proc (" + a.noCgroup.Error() + ")"
		}
		a.log.Info("environments are confined: each runs as a user of its own, in a folder only that user can enter, with only its own environment variables",
			"uids", a.cfg.UIDs.String(), "stop", stop)
		if d := a.confinement.Disks; d != nil {
			a.log.Info("environments write to disks of their own: an ext4 filesystem each, past which their writes fail with ENOSPC",
				"default", bytesize.Format(d.Default), "max", bytesize.Format(d.Max), "images", d.Dir)
		}
		if a.confinement.Namespaces {
			a.log.Info("environments run in namespaces of their own: a network namespace with only lo (no route to the node's addresses, its loopback, other environments or the outside), a PID namespace with its own /proc (it sees only its own processes), a mount namespace (with a /tmp, /var/tmp and /dev/shm of its own) and an IPC namespace; the agent reaches exports inside it; a template with network egress reaches public addresses through the agent's HTTP proxy at 127.0.0.1:" + strconv.Itoa(confine.EgressPort) + " of its namespace")
			a.logBoundaries()
		} else {
			a.log.Warn("environments share the node's network and process list: each can connect to whatever listens on the node's addresses and loopback (the agent's endpoints, other environments' exports, the cloud's metadata address) and see every process on the node, whatever its template's network says (" + a.noNamespaces.Error() + ")")
		}
		return
	}
	stop := "a stop ends the environment's cgroup (cgroup.kill), but a process may move itself out of it, as the cgroup tree is its user's too"
	if a.confinement.Cgroups == "" {
		stop = "a child that leaves its process group (setsid, a daemon) survives a stop (" + a.noCgroup.Error() + ")"
	}
	a.log.Warn("environments are not confined: the agent does not run as root, so every environment runs as the agent's user (uid " + strconv.Itoa(os.Geteuid()) +
		") and can read the agent's files (its credential file among them) and the other environments' folders and logs, signal the other environments and the agent, run as many processes as the user may (resources.pids counts the user's), connect to whatever listens on the node's addresses and loopback (the agent's endpoints, other environments' exports, the cloud's metadata address) and the outside, whatever its template's network says, and see every process on the node; " + stop)
}

// prepared is the node's boxes made ahead, nil without.
func (a *Agent) prepared() *confine.PreparedBoxes {
	if a.confinement == nil {
		return nil
	}
	return a.confinement.Prepared
}
