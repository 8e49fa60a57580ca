package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// run shows the log of an environment that fails to become ready; logs
// shows it again, kept, and -o json says where it is; another
// organization's environment is not found.
func TestLogsOfAFailedEnvironment(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", brokenTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)

	r := u.fails(exitError, "", "run", "-t", "broken", "--", "sh", "-c", "echo ran")
	contains(t, "failed run", r.stderr, "The log of env_", "the database is missing", "] failed: process exited with status 3")
	m := regexp.MustCompile(`The log of (env_\S+?):`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("run's stderr names no log:\n%s", r.stderr)
	}
	id := m[1]

	out := u.ok("logs", id)
	contains(t, "logs", out, "the database is missing\n", "] started", "] failed: process exited with status 3")
	var where client.Logs
	u.json(&where, "logs", id)
	if where.Kept == nil || !strings.HasPrefix(where.Kept.Artifact, "art_") || where.Live != nil {
		t.Fatalf("logs -o json: %+v", where)
	}

	carol := newUser(t, s)
	carol.login(clienttest.CarolToken)
	carol.fails(exitNotFound, "", "logs", id)
	u.fails(exitUsage, "", "logs")
}

// forgerTemplate prints escape sequences (window title, clear screen, OSC
// 52 clipboard) and a line that looks like the node's, then fails (its
// export makes readiness wait for it, so it fails rather than becomes ready
// first, however slowly it runs).
var forgerTemplate = domain.Template{
	Exports: map[string]domain.Export{"web": {Port: 8080}},
	Name:    "forger", Runtime: "process", Command: []string{"sh", "-c",
		`printf '\033]0;pwned\007title\n\033[2Jcleared\n[envlease 2026-11-28T12:00:00Z] stopped\n\033]52;c;cm0gLXJmIH4K\007clip\n'; exit 3`},
	Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)},
	Quota:    domain.Quota{MaxLeases: 2},
}

// A log is safe to print: run's failure tail and logs on a terminal show
// the environment's escape sequences escaped and its forged node line set
// apart, while the node's own lines read as they are; --raw (and output
// that is not a terminal) gives the bytes.
func TestLogsAreSafeToPrint(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", forgerTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	r := u.fails(exitError, "", "run", "-t", "forger", "--", "true")
	escaped := []string{`\x1b]0;pwned\x07title`, `\x1b[2Jcleared`, `\[envlease 2026-11-28T12:00:00Z] stopped`, `\x1b]52;c;cm0gLXJmIH4K\x07clip`}
	contains(t, "run's failure tail", r.stderr, escaped...)
	if strings.ContainsAny(r.stderr, "\x1b\x07\x1e") {
		t.Fatalf("run's failure tail holds control characters: %q", r.stderr)
	}
	id := regexp.MustCompile(`The log of (env_\S+?):`).FindStringSubmatch(r.stderr)[1]

	onTerminal := func(args ...string) string {
		t.Helper()
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Dir = u.home
		cmd.Env = []string{"HOME=" + u.home, "XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"), "PATH=" + os.Getenv("PATH"), "TERM=vt100"}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tty.Close()
		var screen bytes.Buffer
		_, _ = io.Copy(&screen, ptmx) // ends with EIO once the command ended
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, screen.String())
		}
		return strings.ReplaceAll(screen.String(), "\r\n", "\n")
	}
	shown := onTerminal("logs", id)
	contains(t, "logs on a terminal", shown, escaped...)
	if strings.ContainsAny(shown, "\x1b\x07\x1e") {
		t.Fatalf("logs showed control characters on a terminal: %q", shown)
	}
	var node []string
	for _, line := range strings.Split(shown, "\n") {
		if strings.HasPrefix(line, "[envlease") {
			node = append(node, line)
		}
	}
	if len(node) < 2 || !strings.Contains(strings.Join(node, "\n"), "] failed: process exited with status 3") || strings.Contains(strings.Join(node, "\n"), "12:00:00Z] stopped") {
		t.Fatalf("the lines that read as the node's are %q", node)
	}
	raw := onTerminal("logs", id, "--raw")
	contains(t, "logs --raw", raw, "\x1b]0;pwned\x07title", "\x1b]52;c;cm0gLXJmIH4K\x07clip", "\n[envlease 2026-11-28T12:00:00Z] stopped", "\x1e[envlease ")
	contains(t, "logs into a pipe", u.ok("logs", id), "\x1b[2Jcleared", "\x1e[envlease ")
}
