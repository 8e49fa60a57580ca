// Package logline is the format of an environment's log (live from its node
// and kept as an artifact), shared by the agent that writes it and the
// clients that show it (docs/environments.md, "Logs").
//
// The log is the environment's output, byte for byte, with the node's own
// lines among it. A node's line begins with Mark, the control character RS
// (0x1e), which the environment's output never holds: the agent replaces
// every RS the environment writes with "␞" (U+241E, Neutral). So whatever an
// environment prints, no line it writes begins with Mark, and a reader tells
// the node's lines from the environment's by their first byte alone.
//
// Terminal shows a log on a terminal: the node's lines without their mark,
// the environment's with every C0 and C1 control character but newline and
// tab escaped (no escape sequence of the environment's reaches the
// terminal: no window title, no clear screen, no OSC 52 clipboard write),
// and a line of the environment's that would look like a node's
// ("[envlease ...") shown after a backslash. On a terminal, only the node's
// lines begin with "[envlease".
package logline

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Mark begins every line of the node's own in an environment's log.
const Mark = '\x1e'

// markSubstitute is what an RS of the environment's output becomes.
const markSubstitute = "␞"

// nodePrefix is how a node's line reads once its mark is taken off.
const nodePrefix = "[envlease"

// Node is a line of the node's own, stamped with t: Mark, "[envlease T] ",
// msg (its own RS and newlines made harmless), newline.
func Node(t time.Time, msg string) string {
	return Note("[envlease " + t.UTC().Format(time.RFC3339) + "] " + msg)
}

// Note is a node's line without a time: Mark, the text, newline.
func Note(text string) string {
	text = strings.ReplaceAll(text, string(Mark), markSubstitute)
	text = strings.ReplaceAll(text, "\n", " ")
	return string(Mark) + text + "\n"
}

// IsNode says whether a line (without its newline) is the node's.
func IsNode(line string) bool { return strings.HasPrefix(line, string(Mark)) }

// Neutral returns the environment's output p with every Mark replaced, so
// that none of its lines can pass for the node's; p itself when it holds
// none (the common case costs one scan and no copy).
func Neutral(p []byte) []byte {
	if bytes.IndexByte(p, Mark) < 0 {
		return p
	}
	return bytes.ReplaceAll(p, []byte{Mark}, []byte(markSubstitute))
}

// Escape returns one line of a log (without its newline) as it is shown on
// a terminal or a page: a node's line without its mark; an environment's
// with its control characters escaped and a backslash before a leading
// "[envlease".
func Escape(line string) string {
	if IsNode(line) {
		return escapeControls(line[1:])
	}
	s := escapeControls(line)
	if strings.HasPrefix(s, nodePrefix) {
		s = `\` + s
	}
	return s
}

// escapeControls writes C0 controls (but tab), DEL, C1 controls (as UTF-8
// code points U+0080 to U+009F) and bytes that are not UTF-8 as Go escapes
// (\x1b, \u009b, \xff): visible, and inert on any terminal.
func escapeControls(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte('\t')
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// maxLine bounds what Terminal holds of a line that has not ended: past it
// the line is shown in pieces, each escaped (a log may be one line of
// gigabytes).
const maxLine = 64 << 10

// Terminal returns a writer that shows the log written to it on w (Escape):
// a line as soon as its start is decided (a prompt shows before its
// newline), the rest of it as it comes; Close ends a last line without a
// newline. What it holds is at most one line of maxLine bytes.
func Terminal(w io.Writer) io.WriteCloser { return &terminal{w: w} }

type terminal struct {
	w       io.Writer
	line    []byte
	partial bool // the held line continues a piece already shown
}

func (t *terminal) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.line = append(t.line, p...)
			// A line not ended yet is shown as soon as what it is is
			// decided (a prompt must not wait for its newline): its start
			// can no longer grow into "[envlease".
			if len(t.line) >= maxLine || t.decided() {
				if err := t.flush(false); err != nil {
					return 0, err
				}
			}
			return n, nil
		}
		t.line = append(t.line, p[:i]...)
		if err := t.flush(true); err != nil {
			return 0, err
		}
		p = p[i+1:]
	}
	return n, nil
}

// decided says whether the held line can be shown before it ends: it
// continues a piece already shown, or its start tells the node's line from
// the environment's for good.
func (t *terminal) decided() bool {
	line := t.line
	if len(line) == 0 {
		return false
	}
	return t.partial || line[0] == Mark || len(line) >= len(nodePrefix) || !strings.HasPrefix(nodePrefix, string(line))
}

// flush shows the held line; a piece of a longer line keeps its last
// incomplete UTF-8 sequence for the next.
func (t *terminal) flush(end bool) error {
	line := t.line
	var rest []byte
	if !end {
		cut := len(line)
		for k := 1; k < utf8.UTFMax && k <= len(line); k++ {
			if utf8.RuneStart(line[len(line)-k]) {
				if !utf8.FullRune(line[len(line)-k:]) {
					cut = len(line) - k
				}
				break
			}
		}
		line, rest = line[:cut], line[cut:]
	}
	s := string(line)
	if t.partial {
		s = escapeControls(s)
	} else {
		s = Escape(s)
	}
	if end {
		s += "\n"
	}
	_, err := io.WriteString(t.w, s)
	t.line = append(t.line[:0], rest...)
	t.partial = !end
	return err
}

// Close shows what is held of a last line that did not end, and ends it.
func (t *terminal) Close() error {
	if len(t.line) == 0 && !t.partial {
		return nil
	}
	return t.flush(true)
}
