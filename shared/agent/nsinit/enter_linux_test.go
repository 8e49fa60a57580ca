//go:build linux

package nsinit_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/nsinit"
)

// A command entered into a running environment sees its namespaces (its
// PID namespace, where the environment's command is PID 2, and its /proc),
// runs in the folder and as the user it is given, gets its input, and
// nsenter exits with its status.
func TestEnter(t *testing.T) {
	c, dir := start(t, "echo up > up; exec sleep 600")
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	waitFile(t, dir+"/up")
	for _, tc := range []struct {
		name, script, in string
		uid, code        int
		want             string
	}{
		{"namespaces", `echo $(pwd) $$ $(tr '\0' ' ' < /proc/1/cmdline); exit 3`, "", -1, 3, dir + " "},
		{"input", `read x; echo got $x`, "hello\n", -1, 0, "got hello"},
		{"user", `id -u`, "", 65534, 0, "65534"},
	} {
		wd := dir
		if tc.uid >= 0 {
			wd = "/" // the test's folder is root's alone
		}
		e, err := nsinit.EnterCommand(c.Process.Pid, nsinit.Config{Path: "/bin/sh", Args: []string{"sh", "-c", tc.script},
			Dir: wd, Env: []string{"PATH=/usr/bin:/bin"}, UID: tc.uid, GID: tc.uid})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		e.Stdin, e.Stdout, e.Stderr = strings.NewReader(tc.in), &out, &out
		if err := e.Start(); err != nil {
			e.Close()
			t.Fatal(err)
		}
		if _, err := e.Begin(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = e.Wait()
		if got := e.ProcessState.ExitCode(); got != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s: exit %d, output %q; want %d, %q", tc.name, got, out.String(), tc.code, tc.want)
		}
		if tc.name == "namespaces" && !strings.Contains(out.String(), "envlease-nsinit") {
			t.Errorf("the entered command does not see the environment's processes: %q", out.String())
		}
	}
}
