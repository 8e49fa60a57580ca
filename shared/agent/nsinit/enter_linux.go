//go:build linux

package nsinit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Enter is a command run inside the namespaces of a running environment
// (envlease exec): nsenter(1) joins the mount, IPC, network and PID
// namespaces of the environment's init, since Go cannot join a mount
// namespace once it runs threads, and starts this binary again there as
// the same stage that becomes the environment's own command: it sets
// cfg's limits, CPU affinity and user (no supplementary groups,
// no_new_privs) and execs cfg's command. nsenter stays as the command's
// parent and exits with its status; Begin returns once the command runs.
type Enter struct {
	*exec.Cmd
	pipes
}

// EnterCommand prepares the command that runs cfg in the namespaces of
// process init. The caller sets Stdin, Stdout, Stderr and SysProcAttr (its
// cgroup, a session for a terminal) before Start, then calls Begin.
func EnterCommand(init int, cfg Config) (*Enter, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, errors.New("running a command inside an environment needs nsenter (util-linux) on the node")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p, err := newPipes(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(nsenter, "--target", strconv.Itoa(init), "--mount", "--ipc", "--net", "--pid", "--", self, execMarker)
	cmd.ExtraFiles = p.childFiles()
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return &Enter{Cmd: cmd, pipes: p}, nil
}

// Begin, once started, hands the stage its configuration and waits until
// the command runs: it returns what could not be applied, or why the
// command did not start.
func (e *Enter) Begin() ([]string, error) {
	defer e.repR.Close()
	if err := e.send(); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	// nsenter keeps its copy of the reports open: the stage's last report
	// before the exec says the command starts.
	var warns []string
	lines := bufio.NewReader(e.repR)
	for {
		line, err := lines.ReadBytes('\n')
		if err != nil {
			return nil, errors.New("the command did not start: the stage ended without a word")
		}
		var r report
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		warns = append(warns, r.Warnings...)
		if r.Error != "" {
			return nil, errors.New(r.Error)
		}
		if r.Started {
			return warns, nil
		}
	}
}

// Child is the host pid of the command nsenter started (its one child),
// 0 when the kernel does not say.
func (e *Enter) Child() int {
	pid := e.Process.Pid
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
