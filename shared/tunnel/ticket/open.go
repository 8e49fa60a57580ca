package ticket

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// What a ticket opens besides a tunnel (Claims.Open).
const (
	// OpenExec runs one command inside the environment (envlease exec,
	// envlease shell).
	OpenExec = "exec"
	// OpenLogs reads the environment's log on the node (no targets), on
	// its own route of the endpoint (GET /logs), never as a session.
	OpenLogs = "logs"
	// OpenNetLog reads the environment's network log on the node, on its
	// own route of the endpoint (GET /netlog).
	OpenNetLog = "netlog"
	// OpenMetrics reads the environment's live metrics on the node, on its
	// own route of the endpoint (GET /metrics).
	OpenMetrics = "metrics"
	// OpenPreview is a preview link's token: plain HTTP to one export
	// target, by the host name it names, on the endpoint's preview proxy.
	OpenPreview = "preview"
	// OpenFiles reads (and, with Claims.Write, changes) the environment's
	// files at or below Claims.Path, on the endpoint's files routes
	// (/files/...).
	OpenFiles = "files"
)

// CommandDigest names a command's argv in an exec ticket: hex SHA-256 of
// its JSON array, so the ticket binds the command without carrying its
// arguments (which may hold secrets) in a token a client can read.
func CommandDigest(argv []string) string {
	if argv == nil {
		argv = []string{}
	}
	b, _ := json.Marshal(argv) // a []string always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
