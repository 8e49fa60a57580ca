package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/clienttest"
)

// binary is the envlease command built once for the whole test run: the
// tests run it as a person would, and look only at its exit code and what
// it prints.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "envlease-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "envlease")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// user is a person at a terminal-less shell: their own home and config
// folder, and the stack's URL at hand.
type user struct {
	t    *testing.T
	url  string
	home string
	// env is added to the base environment of every run.
	env []string
}

func newUser(t *testing.T, s *clienttest.Stack) *user {
	t.Helper()
	return &user{t: t, url: s.URL, home: t.TempDir()}
}

// result is what a run of the command showed.
type result struct {
	code           int
	stdout, stderr string
}

// hangGuard only ends a run that hangs, so a broken command fails the test
// instead of the whole test binary; it asserts nothing about speed.
const hangGuard = 5 * time.Minute

func (u *user) run(stdin string, args ...string) result {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = u.home
	cmd.Env = append([]string{
		"HOME=" + u.home,
		"XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"),
		"PATH=" + os.Getenv("PATH"),
		// A refused connection is reported at once, not waited for as a
		// local server still starting (a test that waits sets its own).
		"ENVLEASE_SERVER_WAIT=0",
	}, u.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		u.t.Fatalf("envlease %s: %v", strings.Join(args, " "), err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs a command that must succeed and returns its standard output.
func (u *user) ok(args ...string) string {
	u.t.Helper()
	r := u.run("", args...)
	if r.code != 0 {
		u.t.Fatalf("envlease %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// json runs a command with -o json that must succeed and decodes its output.
func (u *user) json(v any, args ...string) {
	u.t.Helper()
	out := u.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		u.t.Fatalf("envlease %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// fails runs a command that must exit with code and returns the result.
func (u *user) fails(code int, stdin string, args ...string) result {
	u.t.Helper()
	r := u.run(stdin, args...)
	if r.code != code {
		u.t.Fatalf("envlease %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	if r.code != 0 && !strings.Contains(r.stderr, "envlease: ") && !strings.HasPrefix(r.stderr, "{") {
		u.t.Fatalf("envlease %s: exit %d without a message: %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

func (u *user) login(token string, extra ...string) {
	u.t.Helper()
	r := u.run(token+"\n", append([]string{"login", "--url", u.url}, extra...)...)
	if r.code != 0 {
		u.t.Fatalf("login: exit %d: %s", r.code, r.stderr)
	}
}

// contains fails unless every want is in s.
func contains(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, s)
		}
	}
}
