// Package container runs an environment as an OCI container under runc:
// it writes the runtime spec, mounts the root filesystem (an overlay of a
// cached image and the environment's own upper folder) and drives runc the
// way containerd's shim does (create, start, state, kill, delete), keeping a
// small state file per environment so that a restarted agent finds and
// removes what an earlier run left. See docs/nodes.md, "Containers".
package runc

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/envlease/envlease/shared/agent/confine"
)

// Resources are the template's limits; zero means unlimited.
type Resources struct {
	MemoryBytes int64
	Pids        int64
	CPUs        float64
}

// IDMap maps the container's ids 0..Size-1 to the node's HostID onwards.
type IDMap struct {
	HostID uint32
	Size   uint32
}

// Mount is a folder of the node made visible inside (a share, the work
// folder).
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// Config is what the spec of one environment is made of.
type Config struct {
	ID string
	// Rootfs is the root filesystem the agent mounted (absolute).
	Rootfs string
	// ReadOnly makes the root read-only; the Writable paths (absolute,
	// inside) stay writable, bound from the root filesystem onto
	// themselves, so what is written there lands in the environment's
	// upper folder. Tmpfs paths get an empty memory-backed folder.
	ReadOnly bool
	Writable []string
	Tmpfs    []string
	Mounts   []Mount
	// Disk, when the runtime has Disks, is the size of the disk that holds
	// all the container writes (its upper folder).
	Disk *confine.DiskSize
	// Stdout and Stderr get what the container writes there as it comes,
	// besides the capped files of its folder (nil: only those);
	// OutputMax bounds each of those files (default capped.DefaultMax).
	Stdout, Stderr io.Writer
	OutputMax      int64

	Args []string
	Env  []string
	Cwd  string
	UID  uint32
	GID  uint32

	Hostname string
	// NetNS is the path of a network namespace the agent made for the
	// environment (empty: a new, empty one).
	NetNS string
	// UserNS, when set, runs the container in a user namespace whose ids
	// map to the node's HostID onwards (the image cache must then shift its
	// owners alike: ApplyOptions.IDShift).
	UserNS *IDMap
	// CgroupsPath is the container's own cgroup (relative: beneath the
	// agent's).
	CgroupsPath string
	Resources   Resources
	// MaxOpenFiles is the container's RLIMIT_NOFILE (default 65536); the
	// runtime lowers it to the agent's own hard limit, which runc cannot
	// raise without CAP_SYS_RESOURCE.
	MaxOpenFiles uint64
	// SwapAccounting limits memory plus swap to the memory limit, so that
	// swap is no way around it (cgroup v1 with memory.memsw).
	SwapAccounting bool
}

// capabilities a container's processes keep: docker's default set less
// NET_RAW and MKNOD (no raw sockets, no device nodes).
var capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
	"CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP",
}

func (c Config) openFiles() uint64 {
	if c.MaxOpenFiles == 0 {
		return 65536
	}
	return c.MaxOpenFiles
}

// cleanInside checks that p is an absolute path inside the container.
func cleanInside(what, p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%s %q: not an absolute path", what, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("%s %q: paths with .. are not allowed", what, p)
		}
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("%s %q: the root itself", what, p)
	}
	return c, nil
}

// Spec builds the OCI runtime spec of c.
func Spec(c Config) (*specs.Spec, error) {
	switch {
	case c.ID == "":
		return nil, errors.New("container: no id")
	case !strings.HasPrefix(c.Rootfs, "/"):
		return nil, fmt.Errorf("container: root filesystem %q is not an absolute path", c.Rootfs)
	case len(c.Args) == 0:
		return nil, errors.New("container: no command")
	case c.Resources.MemoryBytes < 0 || c.Resources.Pids < 0 || c.Resources.CPUs < 0:
		return nil, errors.New("container: negative resources")
	}
	cwd := c.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if !strings.HasPrefix(cwd, "/") {
		return nil, fmt.Errorf("container: working folder %q is not an absolute path", cwd)
	}
	hostname := c.Hostname
	if hostname == "" {
		hostname = c.ID
	}
	s := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: c.Rootfs, Readonly: c.ReadOnly},
		Hostname: hostname,
		Process: &specs.Process{
			Args: c.Args,
			Env:  withPath(c.Env),
			Cwd:  cwd,
			User: specs.User{UID: c.UID, GID: c.GID},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: capabilities, Effective: capabilities, Permitted: capabilities,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: c.openFiles(), Soft: c.openFiles()}},
			NoNewPrivileges: true,
		},
		Mounts: baseMounts(),
		Linux: &specs.Linux{
			CgroupsPath: c.CgroupsPath,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
				{Type: specs.NetworkNamespace, Path: c.NetNS},
			},
			Resources: resources(c.Resources, c.SwapAccounting),
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
	if c.UID != 0 {
		// An unprivileged user keeps no capabilities.
		s.Process.Capabilities = &specs.LinuxCapabilities{}
	}
	if c.UserNS != nil {
		if c.UserNS.Size == 0 {
			return nil, errors.New("container: a user namespace mapping of no ids")
		}
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: c.UserNS.HostID, Size: c.UserNS.Size}}
		s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	}
	seen := map[string]bool{}
	for _, m := range s.Mounts {
		seen[m.Destination] = true
	}
	add := func(m specs.Mount) error {
		if seen[m.Destination] {
			return fmt.Errorf("container: two mounts at %s", m.Destination)
		}
		seen[m.Destination] = true
		s.Mounts = append(s.Mounts, m)
		return nil
	}
	if c.ReadOnly {
		ws, err := WritablePaths(c.Writable)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if err := add(specs.Mount{Destination: w, Type: "bind", Source: path.Join(c.Rootfs, w),
				Options: []string{"rbind", "rw", "nosuid", "nodev"}}); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range c.Tmpfs {
		d, err := cleanInside("tmpfs", t)
		if err != nil {
			return nil, err
		}
		if err := add(specs.Mount{Destination: d, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=1777"}}); err != nil {
			return nil, err
		}
	}
	for _, m := range c.Mounts {
		d, err := cleanInside("mount", m.Destination)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(m.Source, "/") {
			return nil, fmt.Errorf("container: mount source %q is not an absolute path", m.Source)
		}
		opts := []string{"rbind", "rw", "nosuid", "nodev"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		if err := add(specs.Mount{Destination: d, Type: "bind", Source: m.Source, Options: opts}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// WritablePaths cleans and checks a template's writable list, sorted and
// without duplicates.
func WritablePaths(list []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, w := range list {
		c, err := cleanInside("writable path", w)
		if err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out, nil
}

func withPath(env []string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return env
		}
	}
	return append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
}

func baseMounts() []specs.Mount {
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
	return ms
}

func resources(r Resources, swap bool) *specs.LinuxResources {
	out := &specs.LinuxResources{
		// Only the devices runc creates by default (null, zero, full,
		// random, urandom, tty, pts): runc adds their rules to this denial.
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if r.MemoryBytes > 0 {
		m := r.MemoryBytes
		out.Memory = &specs.LinuxMemory{Limit: &m}
		if swap {
			s := m
			out.Memory.Swap = &s
		}
	}
	if r.Pids > 0 {
		n := r.Pids
		out.Pids = &specs.LinuxPids{Limit: &n}
	}
	if r.CPUs > 0 {
		period := uint64(100000)
		quota := int64(r.CPUs * float64(period))
		if quota < 1000 {
			quota = 1000
		}
		out.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return out
}
