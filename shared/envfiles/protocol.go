// Package envfiles is the protocol of an environment's files on its node
// (docs/files.md): what the node's files endpoint answers, its errors, and
// the client of it that the Go client, the CLI (cp, fs) and the MCP server
// use. The agent's side is in shared/agent (files_endpoint.go) over the
// confined file operations of shared/agent/envfs.
package envfiles

import (
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"time"
)

// Routes of the files endpoint, below the ticket's url.
const (
	RouteRead   = "/read"
	RouteWrite  = "/write"
	RouteStat   = "/stat"
	RouteList   = "/list"
	RouteMkdir  = "/mkdir"
	RouteRemove = "/remove"
	RouteWatch  = "/watch"
)

// ModeHeader carries a read file's permission bits, in octal.
const ModeHeader = "Envlease-File-Mode"

// MaxList bounds the entries of one list answer.
const MaxList = 10000

// Entry types.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// FileInfo is one entry of an environment's files.
type FileInfo struct {
	Name     string    `json:"name"`
	Path     string    `json:"path"`
	Type     string    `json:"type"`
	Size     int64     `json:"size"`
	Mode     string    `json:"mode"`
	Modified time.Time `json:"modified"`
	// Target is where a symbolic link points.
	Target string `json:"target,omitempty"`
}

// IsDir reports whether it is a folder.
func (f FileInfo) IsDir() bool { return f.Type == TypeDir }

// Perm is Mode as bits (0 if malformed).
func (f FileInfo) Perm() fs.FileMode {
	m, err := ParseMode(f.Mode)
	if err != nil {
		return 0
	}
	return m
}

// FileList is a folder's entries, sorted by name.
type FileList struct {
	Path      string     `json:"path"`
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated"`
}

// Ops of a watch's lines.
const (
	OpWatching = "watching"
	OpCreate   = "create"
	OpWrite    = "write"
	OpRemove   = "remove"
	OpRename   = "rename"
	OpChmod    = "chmod"
	OpOverflow = "overflow"
	OpEnd      = "end"
)

// FileChange is one line of a watch.
type FileChange struct {
	Op     string     `json:"op"`
	Path   string     `json:"path,omitempty"`
	Type   string     `json:"type,omitempty"`
	Time   *time.Time `json:"time,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// Reasons of the endpoint's errors: what exactly was refused.
const (
	ReasonBadPath         = "bad_path"
	ReasonBadParameter    = "bad_parameter"
	ReasonTicket          = "ticket"
	ReasonOutsideRoot     = "outside_root"
	ReasonSpecialPath     = "special_path"
	ReasonReadOnly        = "read_only"
	ReasonPermission      = "permission_denied"
	ReasonOutsideTicket   = "outside_ticket"
	ReasonNotFound        = "not_found"
	ReasonEnvironmentGone = "environment_gone"
	ReasonIsDir           = "is_dir"
	ReasonNotDir          = "not_dir"
	ReasonNotEmpty        = "not_empty"
	ReasonExists          = "exists"
	ReasonOutOfDisk       = "out_of_disk"
	ReasonTooManyFolders  = "too_many_folders"
	ReasonBusy            = "busy"
	ReasonInternal        = "internal"
)

// reasonCodes gives each reason its code (the API's) and status.
var reasonCodes = map[string]struct {
	code   string
	status int
}{
	ReasonBadPath: {"bad_request", 400}, ReasonBadParameter: {"bad_request", 400},
	ReasonTicket:      {"unauthorized", 401},
	ReasonOutsideRoot: {"forbidden", 403}, ReasonSpecialPath: {"forbidden", 403}, ReasonReadOnly: {"forbidden", 403},
	ReasonPermission: {"forbidden", 403}, ReasonOutsideTicket: {"forbidden", 403},
	ReasonNotFound: {"not_found", 404}, ReasonEnvironmentGone: {"not_found", 404},
	ReasonIsDir: {"conflict", 409}, ReasonNotDir: {"conflict", 409}, ReasonNotEmpty: {"conflict", 409}, ReasonExists: {"conflict", 409},
	ReasonOutOfDisk: {"too_large", 413}, ReasonTooManyFolders: {"too_large", 413},
	ReasonBusy:     {"unavailable", 503},
	ReasonInternal: {"internal", 500},
}

// Error is an error of the files endpoint, on either side.
type Error struct {
	Message string `json:"error"`
	Code    string `json:"code"`
	Reason  string `json:"reason"`
	// Status is the HTTP status it came with.
	Status int `json:"-"`
}

// Error says what was refused, then its code and reason, such as
// "/proc is the kernel's view (forbidden: special_path)".
func (e *Error) Error() string {
	if e.Code == "" && e.Reason == "" {
		return e.Message
	}
	return e.Message + " (" + e.Code + ": " + e.Reason + ")"
}

// Errorf makes the error of reason, with its code and status.
func Errorf(reason, format string, args ...any) *Error {
	c, ok := reasonCodes[reason]
	if !ok {
		c = reasonCodes[ReasonInternal]
	}
	return &Error{Message: fmt.Sprintf(format, args...), Code: c.code, Reason: reason, Status: c.status}
}

// StatusOf is the HTTP status of reason.
func StatusOf(reason string) int {
	if c, ok := reasonCodes[reason]; ok {
		return c.status
	}
	return http.StatusInternalServerError
}

// FormatMode writes permission bits (and setuid, setgid, sticky) as four
// octal digits.
func FormatMode(m fs.FileMode) string {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return fmt.Sprintf("%04o", bits)
}

// ParseMode reads octal permission bits ("644", "0644", "4755").
func ParseMode(s string) (fs.FileMode, error) {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("mode %q is not octal permission bits such as 0644", s)
	}
	m := fs.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m, nil
}
