package procstat

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A tree of a shell and a child that computes: the child is counted, and
// its CPU time grows.
func TestTreeCountsChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sh -c 'while :; do :; done' & sleep 30")
	// A group of its own, killed whole: the computing child must not
	// outlive the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	var first Usage
	for i := 0; ; i++ {
		u, err := Tree("/proc", cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = u
		}
		if u.Processes >= 3 && u.CPUSeconds > first.CPUSeconds && u.RSSBytes > 0 {
			break
		}
		if i > 200 {
			t.Fatalf("tree of %d: %+v then %+v", cmd.Process.Pid, first, u)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := Tree("/proc", 1<<30); err != ErrNoProcess {
		t.Fatalf("no such pid: %v", err)
	}
}
