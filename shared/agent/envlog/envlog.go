// Package envlog is one environment's log on its node: what its command
// writes to stdout and stderr, and the agent's own lines about it, in a
// file of bounded size. The file is a ring: once it holds Max bytes, each
// write overwrites the oldest, so a command that prints without end never
// fills the node and never waits for anyone, readers included. Offsets are
// counted from the log's beginning and never reused, so a follower resumes
// where it stopped and learns exactly how much was cut meanwhile. The
// agent's lines are marked as the node's (package logline): the
// environment's output cannot forge one. See docs/nodes.md, "Logs".
package envlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/logline"
)

// DefaultMax is the default bound of a log: the last 16 MiB are kept.
const DefaultMax = 16 << 20

// maxMarks bounds the (time, offset) marks --since is answered from.
const maxMarks = 4096

// Log is one environment's log. Its methods are safe for concurrent use.
type Log struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	max    int64
	end    int64 // bytes ever written: the offset of the next byte
	closed bool
	wake   chan struct{}
	marks  []mark
	now    func() time.Time
	// lost counts bytes a failing disk did not take, said in the kept log.
	lost int64
	// midLine: the last byte written was not a newline, so a node's line
	// begins with one of its own.
	midLine bool
	// readers hold the file open past Remove (Hold), so a follower reads
	// to the end of a log removed under it.
	readers int
	removed bool
}

// mark says that the byte at off was written at t (at most one a second).
type mark struct {
	t   time.Time
	off int64
}

// Create makes a log at path (replacing what was there) of at most max
// bytes (DefaultMax if max <= 0); now is the clock of its marks.
func Create(path string, max int64, now func() time.Time) (*Log, error) {
	if max <= 0 {
		max = DefaultMax
	}
	if now == nil {
		now = time.Now
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return &Log{f: f, path: path, max: max, wake: make(chan struct{}), now: now}, nil
}

// Max is the log's bound in bytes.
func (l *Log) Max() int64 { return l.max }

// Write appends the environment's output p, with any byte that would mark
// a node's line replaced (logline.Neutral). It never fails and never blocks
// for longer than a write to the node's disk: the environment's output must
// not stall on its log. A write to a closed log is dropped.
func (l *Log) Write(p []byte) (int, error) {
	n := len(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || n == 0 {
		return n, nil
	}
	l.append(logline.Neutral(p))
	return n, nil
}

// append writes p at the log's end; l.mu is held.
func (l *Log) append(p []byte) {
	if len(p) == 0 {
		return
	}
	l.midLine = p[len(p)-1] != '\n'
	now := l.now()
	if k := len(l.marks); k == 0 || now.Sub(l.marks[k-1].t) >= time.Second {
		if k == maxMarks {
			// Keep every other mark: --since gets coarser, never unbounded.
			kept := l.marks[:0]
			for i := 0; i < k; i += 2 {
				kept = append(kept, l.marks[i])
			}
			l.marks = kept
		}
		l.marks = append(l.marks, mark{t: now, off: l.end})
	}
	if int64(len(p)) > l.max {
		// Only the last max bytes of it can be kept.
		skip := int64(len(p)) - l.max
		l.end += skip
		p = p[skip:]
	}
	for len(p) > 0 {
		pos := l.end % l.max
		chunk := p[:min(int64(len(p)), l.max-pos)]
		if _, err := l.f.WriteAt(chunk, pos); err != nil {
			l.lost += int64(len(chunk))
		}
		l.end += int64(len(chunk))
		p = p[len(chunk):]
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

// Notef writes one line of the agent's own about the environment, marked
// as the node's (logline.Node) and stamped with the time, on a line of its
// own even when the environment's last output did not end its line.
func (l *Log) Notef(format string, args ...any) {
	line := logline.Node(l.now(), fmt.Sprintf(format, args...))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.midLine {
		line = "\n" + line
	}
	l.append([]byte(line))
}

// Close ends the log: later writes are dropped and followers, once they
// have read everything, see the end. What it holds stays readable.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
}

// Remove closes the log and deletes its file; the file stays readable for
// the readers that hold it (Hold) until the last lets go.
func (l *Log) Remove() {
	l.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed {
		return
	}
	l.removed = true
	_ = os.Remove(l.path)
	if l.readers == 0 {
		_ = l.f.Close()
	}
}

// Hold keeps the log readable until Release, even if it is removed
// meanwhile; false when it was removed already.
func (l *Log) Hold() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed {
		return false
	}
	l.readers++
	return true
}

// Release lets go of a Hold.
func (l *Log) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readers--
	if l.readers == 0 && l.removed {
		_ = l.f.Close()
	}
}

// Bounds are the offsets of the first byte still kept and of the next byte
// to be written; start > 0 says the log was cut.
func (l *Log) Bounds() (start, end int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start(), l.end
}

func (l *Log) start() int64 { return max(0, l.end-l.max) }

// OffsetSince is the offset of the first byte written at t or later (to
// within a second), the log's end when nothing was written since.
func (l *Log) OffsetSince(t time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.marks {
		if !m.t.Before(t) {
			return max(m.off, l.start())
		}
	}
	return l.end
}

// ReadAt reads into p from offset off, or from the first byte still kept
// if off was cut: from is where the bytes read begin (from > off says
// from-off bytes were lost). n is 0 at the end of what was written.
func (l *Log) ReadAt(p []byte, off int64) (n int, from int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from = max(off, l.start())
	if from >= l.end {
		return 0, min(from, l.end), nil
	}
	want := min(int64(len(p)), l.end-from)
	pos := from % l.max
	first := min(want, l.max-pos)
	if _, err := l.f.ReadAt(p[:first], pos); err != nil {
		return 0, from, err
	}
	if rest := want - first; rest > 0 {
		if _, err := l.f.ReadAt(p[first:want], 0); err != nil {
			return 0, from, err
		}
	}
	return int(want), from, nil
}

// Wait waits until the log holds bytes at or past off, or is closed, or
// ctx ends; it reports whether there may be more to read.
func (l *Log) Wait(ctx context.Context, off int64) bool {
	for {
		l.mu.Lock()
		more, closed, wake := l.end > off, l.closed, l.wake
		l.mu.Unlock()
		if more {
			return true
		}
		if closed {
			return false
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// Kept writes what the log keeps, as it is uploaded once the environment
// ended: when the log was cut, a first line says how much, and the cut
// partial line is dropped. It returns the bytes written.
func (l *Log) Kept(w io.Writer) (int64, error) {
	start, end := l.Bounds()
	var written int64
	off := start
	buf := make([]byte, 64<<10)
	if start > 0 {
		n, from, err := l.ReadAt(buf, start)
		if err != nil {
			return 0, err
		}
		// Begin at a line: skip the rest of the line the cut went through,
		// if it ends within the first read.
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			off = from + int64(i) + 1
		}
		head := logline.Note(fmt.Sprintf("[envlease] the log was cut: its first %d bytes are not kept (the node keeps the last %d)", off, l.max))
		k, err := io.WriteString(w, head)
		written += int64(k)
		if err != nil {
			return written, err
		}
	}
	if lost := l.lostBytes(); lost > 0 {
		k, err := io.WriteString(w, logline.Note(fmt.Sprintf("[envlease] the node's disk did not take %d bytes of this log", lost)))
		written += int64(k)
		if err != nil {
			return written, err
		}
	}
	for off < end {
		n, from, err := l.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		if err != nil {
			return written, err
		}
		if n == 0 {
			break
		}
		k, err := w.Write(buf[:n])
		written += int64(k)
		if err != nil {
			return written, err
		}
		off = from + int64(n)
	}
	return written, nil
}

func (l *Log) lostBytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}
