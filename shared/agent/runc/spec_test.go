package runc

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func base() Config {
	return Config{ID: "env-1", Rootfs: "/node/env-1/rootfs", Args: []string{"/bin/sh"}}
}

func mountAt(s *specs.Spec, dest string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dest {
			return &s.Mounts[i]
		}
	}
	return nil
}

func hasNS(s *specs.Spec, t specs.LinuxNamespaceType) (specs.LinuxNamespace, bool) {
	for _, n := range s.Linux.Namespaces {
		if n.Type == t {
			return n, true
		}
	}
	return specs.LinuxNamespace{}, false
}

func TestSpec(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		check func(t *testing.T, s *specs.Spec)
		err   string
	}{
		{"defaults", nil, func(t *testing.T, s *specs.Spec) {
			if s.Root.Path != "/node/env-1/rootfs" || s.Root.Readonly {
				t.Errorf("root = %+v", s.Root)
			}
			if s.Process.Cwd != "/" || s.Hostname != "env-1" || !s.Process.NoNewPrivileges {
				t.Errorf("cwd %q hostname %q nnp %v", s.Process.Cwd, s.Hostname, s.Process.NoNewPrivileges)
			}
			if !strings.HasPrefix(s.Process.Env[0], "PATH=") {
				t.Errorf("env = %v, want a PATH", s.Process.Env)
			}
			for _, ns := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.NetworkNamespace, specs.CgroupNamespace} {
				if n, ok := hasNS(s, ns); !ok || n.Path != "" {
					t.Errorf("namespace %s: %v %+v", ns, ok, n)
				}
			}
			if _, ok := hasNS(s, specs.UserNamespace); ok {
				t.Error("a user namespace without a mapping")
			}
			if r := s.Linux.Resources; r.Memory != nil || r.Pids != nil || r.CPU != nil {
				t.Errorf("limits without resources: %+v", r)
			}
			for _, c := range s.Process.Capabilities.Bounding {
				if c == "CAP_SYS_ADMIN" || c == "CAP_NET_RAW" || c == "CAP_MKNOD" {
					t.Errorf("capability %s kept", c)
				}
			}
		}, ""},
		{"process", func(c *Config) {
			c.Args = []string{"/app/server", "--port", "8080"}
			c.Env = []string{"PATH=/app", "A=b"}
			c.Cwd, c.UID, c.GID = "/work", 1000, 1001
		}, func(t *testing.T, s *specs.Spec) {
			p := s.Process
			if strings.Join(p.Args, " ") != "/app/server --port 8080" || strings.Join(p.Env, " ") != "PATH=/app A=b" ||
				p.Cwd != "/work" || p.User.UID != 1000 || p.User.GID != 1001 {
				t.Errorf("process = %+v", p)
			}
			if len(p.Capabilities.Bounding) != 0 {
				t.Errorf("an unprivileged user keeps capabilities %v", p.Capabilities.Bounding)
			}
		}, ""},
		{"resources", func(c *Config) {
			c.Resources = Resources{MemoryBytes: 256 << 20, Pids: 128, CPUs: 1.5}
			c.SwapAccounting = true
			c.CgroupsPath = "envlease/env-1"
		}, func(t *testing.T, s *specs.Spec) {
			r := s.Linux.Resources
			if *r.Memory.Limit != 256<<20 || *r.Memory.Swap != 256<<20 {
				t.Errorf("memory = %d swap %d", *r.Memory.Limit, *r.Memory.Swap)
			}
			if r.Pids.Limit == nil || *r.Pids.Limit != 128 || *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 {
				t.Errorf("pids %v cpu %d/%d", r.Pids.Limit, *r.CPU.Quota, *r.CPU.Period)
			}
			if s.Linux.CgroupsPath != "envlease/env-1" {
				t.Errorf("cgroups path %q", s.Linux.CgroupsPath)
			}
		}, ""},
		{"memory without swap accounting", func(c *Config) { c.Resources.MemoryBytes = 1 << 30 }, func(t *testing.T, s *specs.Spec) {
			if s.Linux.Resources.Memory.Swap != nil {
				t.Error("swap limit set without swap accounting")
			}
		}, ""},
		{"read-only root with writable paths", func(c *Config) {
			c.ReadOnly = true
			c.Writable = []string{"/var/lib/app/", "/home/user", "/home/user"}
			c.Tmpfs = []string{"/tmp"}
			c.Mounts = []Mount{{Source: "/node/shares/s1", Destination: "/mnt/share", ReadOnly: true}}
		}, func(t *testing.T, s *specs.Spec) {
			if !s.Root.Readonly {
				t.Error("root not read-only")
			}
			for _, w := range []string{"/var/lib/app", "/home/user"} {
				m := mountAt(s, w)
				if m == nil || m.Type != "bind" || m.Source != "/node/env-1/rootfs"+w || m.Options[1] != "rw" {
					t.Errorf("writable %s: %+v", w, m)
				}
			}
			if n := len(s.Mounts); n != 7+2+1+1 {
				t.Errorf("%d mounts", n)
			}
			if m := mountAt(s, "/tmp"); m == nil || m.Type != "tmpfs" {
				t.Errorf("tmpfs: %+v", m)
			}
			if m := mountAt(s, "/mnt/share"); m == nil || m.Options[1] != "ro" || m.Source != "/node/shares/s1" {
				t.Errorf("share: %+v", m)
			}
		}, ""},
		{"network and user namespaces", func(c *Config) {
			c.NetNS = "/run/netns/env-1"
			c.UserNS = &IDMap{HostID: 100000, Size: 65536}
		}, func(t *testing.T, s *specs.Spec) {
			if n, _ := hasNS(s, specs.NetworkNamespace); n.Path != "/run/netns/env-1" {
				t.Errorf("netns %+v", n)
			}
			if _, ok := hasNS(s, specs.UserNamespace); !ok {
				t.Error("no user namespace")
			}
			if m := s.Linux.UIDMappings; len(m) != 1 || m[0].HostID != 100000 || m[0].Size != 65536 || m[0].ContainerID != 0 {
				t.Errorf("uid mappings %+v", m)
			}
		}, ""},
		{"no id", func(c *Config) { c.ID = "" }, nil, "no id"},
		{"no command", func(c *Config) { c.Args = nil }, nil, "no command"},
		{"relative rootfs", func(c *Config) { c.Rootfs = "rootfs" }, nil, "absolute"},
		{"relative cwd", func(c *Config) { c.Cwd = "work" }, nil, "absolute"},
		{"writable ..", func(c *Config) { c.ReadOnly = true; c.Writable = []string{"/data/../etc"} }, nil, ".."},
		{"writable relative", func(c *Config) { c.ReadOnly = true; c.Writable = []string{"data"} }, nil, "absolute"},
		{"writable root", func(c *Config) { c.ReadOnly = true; c.Writable = []string{"/"} }, nil, "root itself"},
		{"mount over a base mount", func(c *Config) { c.Tmpfs = []string{"/proc"} }, nil, "two mounts"},
		{"negative", func(c *Config) { c.Resources.Pids = -1 }, nil, "negative"},
		{"empty user namespace", func(c *Config) { c.UserNS = &IDMap{HostID: 1} }, nil, "no ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			if tc.edit != nil {
				tc.edit(&c)
			}
			s, err := Spec(c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}
