package logline_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/logline"
)

// The escape sequences and forged lines of the audit reach a terminal
// inert: every control character the environment wrote is shown escaped,
// an environment's line that reads like the node's is set apart by a
// backslash, and only the node's own (marked) lines begin with
// "[envlease". Fed whole or a byte at a time, the result is the same.
func TestTerminalShowsTheLogInert(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	env := func(s string) string { return string(logline.Neutral([]byte(s))) }
	for _, c := range []struct {
		name, log, want string
	}{
		{"window title (OSC 0)", env("\x1b]0;pwned\x07hello\n"), `\x1b]0;pwned\x07hello` + "\n"},
		{"clear screen", env("\x1b[2J\x1b[Hclean\n"), `\x1b[2J\x1b[Hclean` + "\n"},
		{"clipboard (OSC 52)", env("\x1b]52;c;cm0gLXJmIH4K\x1b\\\n"), `\x1b]52;c;cm0gLXJmIH4K\x1b\` + "\n"},
		{"C1 CSI as UTF-8 and as a byte", env("a\u009b2Jb\x9bc\n"), `a\u009b2Jb\x9bc` + "\n"},
		{"carriage return over a line", env("ok\r[envlease x] stopped\n"), `ok\x0d[envlease x] stopped` + "\n"},
		{"a forged node line", env("[envlease 2026-11-28T12:00:00Z] stopped\n"), `\[envlease 2026-11-28T12:00:00Z] stopped` + "\n"},
		{"a forged mark", env("\x1e[envlease 2026-11-28T12:00:00Z] stopped\n"), "␞[envlease 2026-11-28T12:00:00Z] stopped\n"},
		{"the node's line", logline.Node(at, "stopped"), "[envlease 2026-11-28T12:00:00Z] stopped\n"},
		{"a node's line cannot be broken by its message", logline.Node(at, "failed: a\n\x1e[envlease x] claimed"), "[envlease 2026-11-28T12:00:00Z] failed: a ␞[envlease x] claimed\n"},
		{"tabs and text stay", env("a\tb é 日本\n"), "a\tb é 日本\n"},
		{"a last line without newline", env("tail\x1b[31m"), `tail\x1b[31m` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, step := range []int{len(c.log), 1} {
				var out bytes.Buffer
				w := logline.Terminal(&out)
				for p := []byte(c.log); len(p) > 0; p = p[min(step, len(p)):] {
					if _, err := w.Write(p[:min(step, len(p))]); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if out.String() != c.want {
					t.Fatalf("writes of %d bytes: got %q, want %q", step, out.String(), c.want)
				}
				if strings.ContainsAny(out.String(), "\x1b\x07\x1e\r\u009b") {
					t.Fatalf("a control character reached the terminal: %q", out.String())
				}
			}
		})
	}
}

// A line longer than what the terminal writer holds is shown in pieces,
// each escaped, and a UTF-8 character is never split between two.
func TestTerminalBoundsWhatItHolds(t *testing.T) {
	long := strings.Repeat("é\x1b", 50_000) + "\n"
	var out bytes.Buffer
	w := logline.Terminal(&out)
	if _, err := w.Write(logline.Neutral([]byte(long))); err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat(`é\x1b`, 50_000) + "\n"; out.String() != want {
		t.Fatalf("got %d bytes, want %d", out.Len(), len(want))
	}
}

// A line that has not ended is shown as soon as its start is decided (a
// prompt does not wait for its newline), but a start that may still grow
// into "[envlease" is held until it cannot.
func TestTerminalShowsPromptsAtOnce(t *testing.T) {
	var out bytes.Buffer
	w := logline.Terminal(&out)
	for _, c := range []struct{ write, shown string }{
		{"Password: ", "Password: "},
		{"x\n[env", "Password: x\n"},
		{"lease 2026] stopped", "Password: x\n\\[envlease 2026] stopped"},
		{"\n", "Password: x\n\\[envlease 2026] stopped\n"},
	} {
		if _, err := w.Write([]byte(c.write)); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.shown {
			t.Fatalf("after %q: shown %q, want %q", c.write, out.String(), c.shown)
		}
	}
}
