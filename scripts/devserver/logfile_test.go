package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The request log goes to its file; warnings and errors show on the
// terminal too, where the banner is.
func TestLogFileKeepsTheTerminalForWhatMatters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devserver.log")
	var terminal bytes.Buffer
	log, closeLog, err := openLog(path, "info", &terminal)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("request", "method", "GET", "path", "/v1/whoami")
	log.With("component", "agent").Error("claim failed", "err", "boom")
	closeLog()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"path":"/v1/whoami"`) || !strings.Contains(lines[1], `"component":"agent"`) {
		t.Fatalf("log file:\n%s", b)
	}
	if got := terminal.String(); strings.Contains(got, "/v1/whoami") || !strings.Contains(got, "claim failed") || !strings.Contains(got, "component=agent") {
		t.Fatalf("terminal: %q", got)
	}
}

// An address in use says what to do: -addr, and the URL to log in with.
func TestAddressInUseNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = run(context.Background(), options{addr: ln.Addr().String(), sweep: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "-addr") || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("run on a used address: %v", err)
	}
}
