package runtimes

import "io"

// Output is where an environment's output goes besides the runtime's own
// files: the agent's log of it (docs/nodes.md, "Logs"). A runtime copies
// its command's stdout and stderr there as they come, and may add lines of
// its own with Note. Writes to it never block for long and never fail.
func Output(e Env) io.Writer {
	if e.Output == nil {
		return io.Discard
	}
	return e.Output
}

// noter is an Output that takes lines of the node's own (envlog.Log).
type noter interface {
	Notef(format string, args ...any)
}

// Note writes a line of the node's own about the environment to w (an
// image pulled, a limit hit), marked as such, when w takes such lines.
func Note(w io.Writer, format string, args ...any) {
	if n, ok := w.(noter); ok {
		n.Notef(format, args...)
	}
}

// ReasonOutOfDisk marks an environment's error when it ended with its disk
// full (resources.disk): what it wrote last may have failed for that.
const ReasonOutOfDisk = "out_of_disk"

// OutOfDisk is the part of an environment's error that says it ran out of
// disk, and how (full says which bound it reached).
func OutOfDisk(full string) string {
	return "ran out of disk (" + ReasonOutOfDisk + "): " + full
}
