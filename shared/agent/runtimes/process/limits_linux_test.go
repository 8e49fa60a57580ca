//go:build linux

package process

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/bytesize"
	"github.com/envlease/envlease/shared/domain"
)

// The memory and pids limits land on the process, as /proc shows them.
func TestApplyResources(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if warns := applyResources(cmd.Process.Pid, domain.Resources{Memory: "512Mi", PIDs: 64, CPUs: 1}, 0); len(warns) > 0 {
		t.Fatalf("warnings: %v", warns)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	limits := string(b)
	for _, want := range []string{"Max address space         536870912            536870912", "Max processes             64                   64"} {
		if !strings.Contains(limits, want) {
			t.Errorf("limits lack %q:\n%s", want, limits)
		}
	}
	if _, err := bytesize.Parse("12 apples"); err == nil {
		t.Error("a bad size parsed")
	}
	if n, _ := bytesize.Parse("2G"); n != 2e9 {
		t.Errorf("2G = %d", n)
	}
}
