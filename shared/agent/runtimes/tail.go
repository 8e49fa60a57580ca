package runtimes

import (
	"strings"
	"sync"
)

// Tail keeps the last bytes written to it: what an environment last wrote
// to stderr, which Handle.Err quotes.
type Tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

// NewTail keeps the last n bytes.
func NewTail(n int) *Tail { return &Tail{n: n} }

func (t *Tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.n {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.n:]...)
	}
	return len(b), nil
}

// LastLines is the last n lines kept, trimmed.
func (t *Tail) LastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
