//go:build linux

package nsinit_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/agent/nsinit"
)

func start(t *testing.T, script string) (*nsinit.Cmd, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("namespaces take root")
	}
	if err := nsinit.Probe(); err != nil {
		t.Skipf("this machine cannot make namespaces: %v", err)
	}
	dir := t.TempDir()
	c, err := nsinit.Command(nsinit.Config{
		Path: "/bin/sh", Args: []string{"sh", "-c", script}, Dir: dir,
		Env: []string{"PATH=/usr/bin:/bin"}, UID: -1, GID: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		c.Close()
		t.Fatal(err)
	}
	if _, err := c.Begin(); err != nil {
		_ = c.Process.Kill()
		_ = c.Wait()
		t.Fatal(err)
	}
	return c, dir
}

func waitFile(t *testing.T, file string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", file)
		}
	}
}

// The init tells how its command ended: an exit status, or the signal that
// killed it (the init itself, PID 1 of its namespace, cannot die of it).
func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   func(syscall.WaitStatus) bool
	}{
		{"exit 3", func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 3 }},
		{"kill -KILL $$", func(ws syscall.WaitStatus) bool { return ws.Signaled() && ws.Signal() == syscall.SIGKILL }},
	} {
		c, _ := start(t, tc.script)
		_ = c.Wait()
		ws, ok := c.Status()
		if !ok || !tc.want(ws) {
			t.Errorf("%q: status %v %v", tc.script, ws, ok)
		}
	}
}

// A SIGTERM to the init's process group reaches the command's own group;
// the command runs as PID 2 of its namespace and sees only its own
// processes; an orphan it leaves is reaped by the init.
func TestSignalsAndProcesses(t *testing.T) {
	c, dir := start(t, `trap 'exit 7' TERM
(sleep 0 &) ; sleep 0.2
ls /proc | grep -c '^[0-9]' > count.tmp; mv count.tmp count
(cat /proc/[0-9]*/stat | awk '$3 == "Z"' | wc -l) > zombies.tmp; mv zombies.tmp zombies
echo $$ > pid.tmp; mv pid.tmp pid
echo > ready
while :; do sleep 0.05; done`)
	waitFile(t, filepath.Join(dir, "ready"))
	if pid := waitFile(t, filepath.Join(dir, "pid")); pid == "1" {
		t.Errorf("the command is pid %s of its namespace; the init is 1", pid)
	}
	// The init, the shell, ls and grep (and possibly a sleep between its
	// start and exit): never the node's processes.
	if n := waitFile(t, filepath.Join(dir, "count")); len(n) > 1 {
		t.Errorf("/proc of the namespace lists %s processes", n)
	}
	if z := waitFile(t, filepath.Join(dir, "zombies")); z != "0" {
		t.Errorf("%s zombie(s) in the namespace: the init did not reap the orphan", z)
	}
	if err := syscall.Kill(-c.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	if ws, ok := c.Status(); !ok || !ws.Exited() || ws.ExitStatus() != 7 {
		t.Fatalf("after SIGTERM: %v %v", ws, ok)
	}
	if c.ProcessState.ExitCode() != 7 {
		t.Fatalf("the init exited %d, want the command's 7", c.ProcessState.ExitCode())
	}
}

// run runs cfg under an init to its end and returns what it wrote, or why
// it did not start.
func run(t *testing.T, cfg nsinit.Config) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("namespaces take root")
	}
	if err := nsinit.Probe(); err != nil {
		t.Skipf("this machine cannot make namespaces: %v", err)
	}
	c, err := nsinit.Command(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		c.Close()
		t.Fatal(err)
	}
	_, berr := c.Begin()
	_ = c.Wait()
	return out.String(), berr
}

// The limits, the CPU affinity and the user are the command's before its
// first instruction, so a child it forks at once has them too; the user
// has no supplementary groups and cannot gain privileges.
func TestConfinedFromFirstInstruction(t *testing.T) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for i := 0; i < 1024 && cpu < 0; i++ {
		if mine.IsSet(i) {
			cpu = i
		}
	}
	child := `sh -c "ulimit -v; grep '^Max processes' /proc/self/limits | tr -s ' ' | cut -d' ' -f3; id -u; id -g; id -G; grep ^Cpus_allowed_list: /proc/self/status; grep ^NoNewPrivs: /proc/self/status"`
	for _, tc := range []struct {
		name    string
		uid     int
		memory  uint64
		want    []string
		wantNNP string
	}{
		{"root", -1, 1 << 30, []string{"1048576", "4096", "0", "0", "0"}, "0"},
		{"user", 65534, 1 << 30, []string{"1048576", "4096", "65534", "65534", "65534"}, "1"},
		// Far below what the Go stage itself has mapped.
		{"little memory", 65534, 16 << 20, []string{"16384", "4096", "65534", "65534", "65534"}, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, nsinit.Config{
				Path: "/bin/sh", Args: []string{"sh", "-c", child}, Dir: "/",
				Env: []string{"PATH=/usr/bin:/bin"}, UID: tc.uid, GID: tc.uid,
				Rlimits: []nsinit.Rlimit{
					{Resource: unix.RLIMIT_AS, Max: tc.memory},
					{Resource: unix.RLIMIT_NPROC, Max: 4096},
				},
				CPUs: []int{cpu},
			})
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 7 {
				t.Fatalf("output %q", out)
			}
			for i, w := range tc.want {
				if strings.TrimSpace(lines[i]) != w {
					t.Errorf("line %d: %q, want %q (output %q)", i, lines[i], w, out)
				}
			}
			if got := strings.Fields(lines[5]); len(got) != 2 || got[1] != strconv.Itoa(cpu) {
				t.Errorf("child's CPUs: %q, want %d", lines[5], cpu)
			}
			if got := strings.Fields(lines[6]); len(got) != 2 || got[1] != tc.wantNNP {
				t.Errorf("child's %q, want NoNewPrivs %s", lines[6], tc.wantNNP)
			}
		})
	}
}

// A command that cannot start is reported as clearly as by exec.
func TestStartError(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  nsinit.Config
		want string
	}{
		{"missing", nsinit.Config{Path: "/no/such/command", Args: []string{"x"}, Dir: "/", UID: -1, GID: -1},
			`start "/no/such/command": no such file or directory`},
		{"folder", nsinit.Config{Path: "/bin/true", Args: []string{"true"}, Dir: "/no/such/folder", UID: 65534, GID: 65534},
			`start "/bin/true": no such file or directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.cfg)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
