// Package execsession runs one command inside an environment through the
// agent of the node that runs it: `envlease exec` and `envlease shell`.
//
// The client asks the API for an exec ticket (POST
// /v1/environments/{id}/exec), which names the environment, "exec" and the
// digest of the one command it runs, and opens the node's endpoint with it
// exactly as a tunnel is opened (package tunnel: an HTTP upgrade or a
// WebSocket, the ticket as bearer token, one yamux session over it, the
// client being yamux's client side). The agent checks the ticket offline.
//
// The session then carries one command, on streams the client opens, each
// beginning with one JSON line that names it:
//
//	control  {"stream": "control", "command": [...], "tty": bool, "rows": n, "cols": n, "term": "xterm"}
//	stdin    {"stream": "stdin"}   then the command's input; its end (FIN) is the input's end
//	stdout   {"stream": "stdout"}  then the command's output (with a terminal: the terminal's)
//	stderr   {"stream": "stderr"}  then its errors; not opened with a terminal
//
// Once it has every stream (within tunnel.HeaderTimeout), the agent checks
// the command against the ticket, starts it and answers on the control
// stream {"ok": true} or {"error": "..."} (and ends the session). The
// client may then write {"resize": {"rows": n, "cols": n}} (a terminal's
// new size) and {"signal": "INT"} (a signal for the command, by name)
// lines on the control stream. When the command has exited and its output
// has been sent, the agent ends the output streams (FIN) and writes the last
// control line, {"exit": code}: the command's exit status, or 128 + the
// signal that killed it, as a shell reports it. Each stream keeps yamux's
// own flow control, so a client that stops reading output stalls only the
// command's writes, never the control lines.
//
// With a terminal, Ctrl-C is a byte on stdin like any other: the terminal
// inside turns it into SIGINT for the command's foreground process group,
// as on a local terminal. See docs/cli.md (exec, shell) and docs/nodes.md.
package execsession

import (
	"bufio"
	"io"
	"syscall"
	"time"

	"github.com/envlease/envlease/shared/tunnel"
)

// Stream names.
const (
	StreamControl = "control"
	StreamStdin   = "stdin"
	StreamStdout  = "stdout"
	StreamStderr  = "stderr"
)

// MaxLine bounds one JSON line: the control stream's first carries the
// command (at most 256 KiB of arguments, which JSON may escape).
const MaxLine = 2 << 20

// HeaderTimeout bounds how long the client may take to open its streams,
// and the client's wait for the agent's answer.
const HeaderTimeout = 30 * time.Second

// Hello is the first line of every stream; only control's carries more
// than its name.
type Hello struct {
	Stream  string   `json:"stream"`
	Command []string `json:"command,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	Rows    uint16   `json:"rows,omitempty"`
	Cols    uint16   `json:"cols,omitempty"`
	// Term is the client's TERM, for a terminal.
	Term string `json:"term,omitempty"`
}

// Size is a terminal's size in characters.
type Size struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Control is a later line of the control stream, from the client.
type Control struct {
	Resize *Size  `json:"resize,omitempty"`
	Signal string `json:"signal,omitempty"`
}

// Status is a line of the control stream from the agent: the answer to
// the request (OK or Error), then the exit.
type Status struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
	Exit  *int   `json:"exit,omitempty"`
}

// Signals are the signals a client may send, by the name it sends.
var Signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM,
}

// SignalName is the name of sig a client sends, "" for one it may not.
func SignalName(sig syscall.Signal) string {
	for n, s := range Signals {
		if s == sig {
			return n
		}
	}
	return ""
}

func writeLine(w io.Writer, v any) error { return tunnel.WriteLineMax(w, v, MaxLine) }

// readLine reads one JSON line of at most MaxLine bytes into v. r must be
// the reader the stream is read through afterwards.
func readLine(r *bufio.Reader, v any) error { return tunnel.ReadLineMax(r, v, MaxLine) }
