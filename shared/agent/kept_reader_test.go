package agent_test

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/envlog"
)

// The upload's body is the kept log as Kept writes it, read as it goes
// rather than held; a body may be closed unread; a removed log's body fails
// rather than hangs.
func TestKeptReader(t *testing.T) {
	l, err := envlog.Create(filepath.Join(t.TempDir(), "env.log"), 1<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = l.Write([]byte(strings.Repeat("a line of output\n", 200))) // over the bound: cut
	l.Close()
	var want bytes.Buffer
	if _, err := l.Kept(&want); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(agent.KeptReader(l))
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes (%v), want %d", len(got), err, want.Len())
	}
	// Closed unread: its writer ends.
	r := agent.KeptReader(l)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	l.Remove()
	if _, err := io.ReadAll(agent.KeptReader(l)); err == nil {
		t.Fatal("a removed log's body read without error")
	}
}
