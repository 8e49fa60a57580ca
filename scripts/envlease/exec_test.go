package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

var execOff = false

// boxTemplate runs nothing but itself; sealedTemplate is the same with
// exec turned off.
var (
	boxTemplate = domain.Template{
		Name: "box", Command: []string{"sh", "-c", "exec sleep 3600"}, Runtime: "process",
		Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
		Quota:    domain.Quota{MaxLeases: 4},
	}
	sealedTemplate = domain.Template{
		Name: "sealed", Command: []string{"sh", "-c", "exec sleep 3600"}, Runtime: "process",
		Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
		Quota:    domain.Quota{MaxLeases: 4}, Exec: &execOff,
	}
)

// envlease exec (the real binary, against the whole stack) exits with
// CMD's code, passes standard input on and keeps output and errors apart;
// CMD's own flags are CMD's. Another organization's environment is not
// found (4); a template with exec: false refuses it (3). Each exec is an
// environment.exec event naming the program, never its arguments.
func TestExec(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", boxTemplate, sealedTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	var leased client.Leased
	u.json(&leased, "lease", "--template", "box", "--wait")
	id := leased.Environment.ID

	r := u.run("hello\n", "exec", id, "--", "sh", "-c", `read x; echo "got $x"; echo warn >&2; exit 7`)
	if r.code != 7 || r.stdout != "got hello\n" || !strings.Contains(r.stderr, "warn") {
		t.Fatalf("exec: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if out := u.ok("exec", id, "sh", "-c", "echo $0-ok", "flagged"); out != "flagged-ok\n" {
		t.Fatalf("CMD's own arguments: %q", out)
	}
	if r := u.run("unread", "exec", "-n", id, "--", "sh", "-c", "cat; echo end"); r.code != 0 || r.stdout != "end\n" {
		t.Fatalf("exec -n: exit %d, %q", r.code, r.stdout)
	}
	// exec's flags after the id, as kubectl users put them.
	if r := u.run("unread", "exec", id, "-n", "--", "sh", "-c", "cat; echo end"); r.code != 0 || r.stdout != "end\n" {
		t.Fatalf("exec ID -n --: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	u.fails(exitUsage, "", "exec", id)

	other := newUser(t, s)
	other.login(clienttest.CarolToken)
	other.fails(exitNotFound, "", "exec", id, "--", "true")

	var sealed client.Leased
	u.json(&sealed, "lease", "--template", "sealed", "--wait")
	r = u.fails(exitAuth, "", "exec", sealed.Environment.ID, "--", "true")
	contains(t, "exec: false", r.stderr, "exec: false")

	// -o json prints one event a line.
	var evs []domain.Event
	for _, line := range strings.Split(strings.TrimSpace(u.ok("events", "--type", "environment.exec", "-o", "json")), "\n") {
		var ev domain.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 4 {
		t.Fatalf("exec events: %+v", evs)
	}
	for _, ev := range evs {
		raw, _ := json.Marshal(ev)
		if ev.Data["command"] != "sh" || ev.Subject.ID != id || ev.Actor.ID != "bob" || strings.Contains(string(raw), "got") || strings.Contains(string(raw), "flagged") {
			t.Errorf("event %s", raw)
		}
	}

	// shell with piped input reads its commands from it and ends with it,
	// as ssh does, rather than waiting in a pseudo-terminal for ever.
	if r := u.run("echo piped-$((2+3))\nexit 4\n", "shell", id); r.code != 4 || r.stdout != "piped-5\n" {
		t.Fatalf("shell with piped input: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r := u.run("", "shell", id); r.code != 0 {
		t.Fatalf("shell with empty input: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
}

// envlease shell opens a shell in a terminal that the test drives as a
// person would: a pseudo-terminal of the test's is envlease's terminal,
// put in raw mode, so Ctrl-C typed there ends the command running in the
// shell and not envlease; the terminal's new size reaches the shell; the
// shell's exit code is envlease's.
func TestShell(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", boxTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	var leased client.Leased
	u.json(&leased, "lease", "--template", "box", "--wait")

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 90}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "shell", leased.Environment.ID)
	cmd.Dir = u.home
	cmd.Env = []string{"HOME=" + u.home, "XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"), "PATH=" + os.Getenv("PATH"), "TERM=vt100"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var screen syncBuffer
	go func() { _, _ = io.Copy(&screen, ptmx) }()
	see := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !strings.Contains(screen.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the terminal never showed %q:\n%s", want, screen.String())
			}
		}
	}
	typ := func(s string) {
		t.Helper()
		if _, err := io.WriteString(ptmx, s); err != nil {
			t.Fatal(err)
		}
	}
	typ("echo $TERM-$((6*7)); stty size\n")
	see("vt100-42")
	see("30 90")
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 44, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(screen.String(), "44 120"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the new size never reached the shell:\n%s", screen.String())
		}
		typ("stty size\n")
	}
	// Ctrl-C once the sleep runs: one sent while the shell still reads its
	// line would flush that line (the terminal's ISIG), and the shell could
	// take the signal after reading the next one. Nor is the shell's own
	// output enough: with job control its child takes the terminal only
	// after the fork, and a Ctrl-C before that goes to the shell, which
	// holds it while the command runs on; so the command prints the marker.
	typ("sh -c 'echo started-$((3+4)); exec sleep 600'; echo after-$((1+1))\n")
	see("started-7")
	typ("\x03")
	// The shell is back at its prompt once it answers; ask until it has.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(screen.String(), "alive-5"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the shell never answered after Ctrl-C:\n%s", screen.String())
		}
		typ("echo alive-$((2+3))\n")
	}
	typ("exit 3\n")
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("shell: exit %d (%v):\n%s", code, err, screen.String())
	}
	if strings.Contains(screen.String(), "after-2") {
		t.Errorf("Ctrl-C did not reach the shell's command:\n%s", screen.String())
	}
}
