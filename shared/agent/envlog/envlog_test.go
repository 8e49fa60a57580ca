package envlog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newLog(t *testing.T, max int64, now func() time.Time) *Log {
	t.Helper()
	l, err := Create(filepath.Join(t.TempDir(), "env.log"), max, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Remove)
	return l
}

func readAll(t *testing.T, l *Log, off int64) (string, int64) {
	t.Helper()
	var out []byte
	buf := make([]byte, 7) // small, to cross the ring's end within reads
	first := int64(-1)
	for {
		n, from, err := l.ReadAt(buf, off)
		if err != nil {
			t.Fatal(err)
		}
		if first < 0 {
			first = from
		}
		if n == 0 {
			return string(out), first
		}
		out = append(out, buf[:n]...)
		off = from + int64(n)
	}
}

// The log keeps its last max bytes, whatever the size of the writes, and
// its file never grows past them; offsets keep counting.
func TestRingKeepsTheLastBytes(t *testing.T) {
	cases := []struct {
		name   string
		writes []string
		want   string
		start  int64
	}{
		{"under the bound", []string{"abc", "def"}, "abcdef", 0},
		{"exactly the bound", []string{"0123456789"}, "0123456789", 0},
		{"wraps", []string{"0123456", "789ab", "cd"}, "456789abcd", 4},
		{"one write over the bound", []string{"xy", "0123456789ABCDEF"}, "6789ABCDEF", 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLog(t, 10, nil)
			for _, w := range c.writes {
				if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("write: %d %v", n, err)
				}
			}
			got, from := readAll(t, l, 0)
			if got != c.want || from != c.start {
				t.Fatalf("read %q from %d, want %q from %d", got, from, c.want, c.start)
			}
			if st, _ := os.Stat(l.path); st.Size() > 10 {
				t.Fatalf("file of %d bytes", st.Size())
			}
			if start, _ := l.Bounds(); start != c.start {
				t.Fatalf("start %d", start)
			}
		})
	}
}

// The kept log says where it was cut and begins at a whole line.
func TestKeptStatesTheCut(t *testing.T) {
	l := newLog(t, 16, nil)
	_, _ = l.Write([]byte("line one\nline two\nline three\n"))
	l.Close()
	var b bytes.Buffer
	if _, err := l.Kept(&b); err != nil {
		t.Fatal(err)
	}
	want := "\x1e[envlease] the log was cut: its first 18 bytes are not kept (the node keeps the last 16)\nline three\n"
	if b.String() != want {
		t.Fatalf("kept %q", b.String())
	}

	whole := newLog(t, 100, nil)
	_, _ = whole.Write([]byte("all of it\n"))
	b.Reset()
	_, _ = whole.Kept(&b)
	if b.String() != "all of it\n" {
		t.Fatalf("uncut %q", b.String())
	}
}

// A follower waits for more, and is told of the end once it read it all.
func TestWaitFollowsUntilClosed(t *testing.T) {
	l := newLog(t, 64, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan bool, 1)
	go func() { got <- l.Wait(ctx, 0) }()
	l.Notef("started")
	if !<-got {
		t.Fatal("no more after a write")
	}
	_, end := l.Bounds()
	go func() { got <- l.Wait(ctx, end) }()
	l.Close()
	if <-got {
		t.Fatal("more after close")
	}
	if s, _ := readAll(t, l, 0); !strings.HasPrefix(s, "\x1e[envlease ") || !strings.HasSuffix(s, "] started\n") {
		t.Fatalf("note %q", s)
	}
	// Closed: writes are dropped.
	_, _ = l.Write([]byte("late"))
	if _, e := l.Bounds(); e != end {
		t.Fatal("a write after close was kept")
	}
}

// --since finds the first byte written at or after a time, to the second.
func TestOffsetSince(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	l := newLog(t, 1<<10, func() time.Time { return now })
	_, _ = l.Write([]byte("old\n"))
	now = now.Add(time.Minute)
	_, _ = l.Write([]byte("new\n"))
	if off := l.OffsetSince(now.Add(-30 * time.Second)); off != 4 {
		t.Fatalf("since 30s: %d", off)
	}
	if off := l.OffsetSince(now.Add(-time.Hour)); off != 0 {
		t.Fatalf("since 1h: %d", off)
	}
	if off := l.OffsetSince(now.Add(time.Second)); off != 8 {
		t.Fatalf("since later: %d", off)
	}
}

// A reader that holds the log reads it to its end after it was removed;
// no one can hold it after that.
func TestHoldOutlivesRemove(t *testing.T) {
	l, err := Create(filepath.Join(t.TempDir(), "env.log"), 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = l.Write([]byte("kept for the reader\n"))
	if !l.Hold() {
		t.Fatal("no hold")
	}
	l.Remove()
	if got, _ := readAll(t, l, 0); got != "kept for the reader\n" {
		t.Fatalf("read after remove: %q", got)
	}
	l.Release()
	if l.Hold() {
		t.Fatal("held after remove")
	}
	if _, err := os.Stat(l.path); !os.IsNotExist(err) {
		t.Fatalf("file left: %v", err)
	}
}

// What the environment writes cannot pass for the node's lines: every
// line that begins with the mark is one the node wrote (Notef), on a line
// of its own even when the environment's last line had not ended, and the
// environment's forged lines and marks are kept as text.
func TestNodeLinesCannotBeForged(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	l := newLog(t, 1<<20, func() time.Time { return at })
	for _, w := range []string{
		"[envlease 2026-11-28T12:00:00Z] stopped\n",
		"\x1e[envlease 2026-11-28T12:00:00Z] claimed by node n_other\n",
		"no newline yet",
	} {
		_, _ = l.Write([]byte(w))
	}
	l.Notef("ready")
	_, _ = l.Write([]byte("\x1e\x1e\n"))
	l.Notef("stopped")
	got, _ := readAll(t, l, 0)
	var node []string
	for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if strings.HasPrefix(line, "\x1e") {
			node = append(node, line)
		}
	}
	want := []string{"\x1e[envlease 2026-11-28T12:00:00Z] ready", "\x1e[envlease 2026-11-28T12:00:00Z] stopped"}
	if strings.Join(node, "|") != strings.Join(want, "|") {
		t.Fatalf("the node's lines are %q, want %q; the log:\n%q", node, want, got)
	}
	if !strings.Contains(got, "␞[envlease 2026-11-28T12:00:00Z] claimed by node n_other\n") || !strings.Contains(got, "no newline yet\n\x1e") {
		t.Fatalf("the environment's output was not kept as text: %q", got)
	}
}
