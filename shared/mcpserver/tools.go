package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/envfiles"
	"github.com/envlease/envlease/shared/execsession"
	"github.com/envlease/envlease/shared/logline"
)

// Environment is an environment as the tools return it.
type Environment struct {
	ID       string `json:"id" jsonschema:"the environment's id, which the other tools take as environment"`
	Name     string `json:"name"`
	Template string `json:"template"`
	State    string `json:"state" jsonschema:"pending, starting, ready (commands and files work), stopping, stopped or failed"`
	// Times are RFC 3339.
	Expires   string   `json:"expires,omitempty" jsonschema:"when it is deleted whatever happens (RFC 3339)"`
	IdleUntil string   `json:"idleUntil,omitempty" jsonschema:"when it is deleted unless used (RFC 3339); commands and files keep it in use"`
	Exports   []string `json:"exports,omitempty" jsonschema:"the names of its network services, for preview_link"`
	Error     string   `json:"error,omitempty" jsonschema:"why it failed"`
	Kept      bool     `json:"kept,omitempty" jsonschema:"it outlives this session (lease keep: true)"`
}

func summary(e domain.Environment) Environment {
	out := Environment{ID: e.ID, Name: e.Name, Template: e.Template, State: string(e.State), Error: e.Error}
	if !e.Expires.IsZero() {
		out.Expires = e.Expires.UTC().Format(time.RFC3339)
	}
	if !e.IdleUntil.IsZero() {
		out.IdleUntil = e.IdleUntil.UTC().Format(time.RFC3339)
	}
	for _, x := range e.Exports {
		out.Exports = append(out.Exports, x.Service)
	}
	return out
}

type envArg struct {
	Environment string `json:"environment" jsonschema:"the environment's id (env_...), as lease or list_environments return it"`
}

type noArgs struct{}

// Template is a template as list_templates returns it.
type Template struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Runtime     string   `json:"runtime" jsonschema:"process or container"`
	Image       string   `json:"image,omitempty" jsonschema:"the container image, for the container runtime"`
	Workdir     string   `json:"workdir,omitempty" jsonschema:"the working folder, where relative paths of commands and files start"`
	Exports     []string `json:"exports,omitempty" jsonschema:"its network services, by name"`
	Idle        string   `json:"idle,omitempty" jsonschema:"how long it lives unused"`
	Hard        string   `json:"hard,omitempty" jsonschema:"how long it lives at most"`
}

type templateList struct {
	Templates []Template `json:"templates"`
}

type environmentList struct {
	Environments []Environment `json:"environments"`
}

type leaseArgs struct {
	Template    string            `json:"template" jsonschema:"the template's name, from list_templates"`
	Name        string            `json:"name,omitempty" jsonschema:"a name for the environment (default: the template's)"`
	Labels      map[string]string `json:"labels,omitempty" jsonschema:"labels to keep with it: lowercase keys, short values"`
	Keep        bool              `json:"keep,omitempty" jsonschema:"keep it when this session ends (default: it is deleted then)"`
	WaitSeconds int               `json:"wait_seconds,omitempty" jsonschema:"how long to wait for it to be ready, at most 600 (default 300)"`
}

type runArgs struct {
	Environment    string   `json:"environment" jsonschema:"the environment's id"`
	Command        string   `json:"command,omitempty" jsonschema:"a shell command line, run with sh -c in the environment's working folder; give this or args"`
	Args           []string `json:"args,omitempty" jsonschema:"a program and its arguments, run without a shell; give this or command"`
	Stdin          string   `json:"stdin,omitempty" jsonschema:"text for the command's standard input (default: none)"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"stop the command after this long (default 600)"`
	MaxOutputBytes int      `json:"max_output_bytes,omitempty" jsonschema:"keep at most this much of stdout and of stderr each, its start and its end (default 65536, at most 4194304)"`
}

// RunResult is what run_command returns.
type RunResult struct {
	ExitCode        int    `json:"exit_code" jsonschema:"the command's exit status (128 + the signal when a signal ended it; -1 when it timed out)"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty" jsonschema:"the middle of stdout was cut to max_output_bytes"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty" jsonschema:"the middle of stderr was cut to max_output_bytes"`
	TimedOut        bool   `json:"timed_out,omitempty" jsonschema:"the command ran past timeout_seconds and was stopped"`
}

type readArgs struct {
	Environment string `json:"environment" jsonschema:"the environment's id"`
	Path        string `json:"path" jsonschema:"the file: absolute from the environment's root, or relative to its working folder"`
	MaxBytes    int    `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes from its start (default 1048576, at most 8388608)"`
}

// FileContent is what read_file returns.
type FileContent struct {
	Path      string `json:"path"`
	Size      int64  `json:"size" jsonschema:"the file's whole size in bytes"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding" jsonschema:"utf-8, or base64 when the file is not text"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"only the first max_bytes were read"`
}

type writeArgs struct {
	Environment string `json:"environment" jsonschema:"the environment's id"`
	Path        string `json:"path" jsonschema:"the file: absolute from the environment's root, or relative to its working folder; missing folders are made"`
	Content     string `json:"content" jsonschema:"the file's whole new content"`
	Encoding    string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64 (content is base64 of the bytes)"`
	Mode        string `json:"mode,omitempty" jsonschema:"permission bits in octal such as 0755 for a script (default: the replaced file's, else 0644)"`
}

type listArgs struct {
	Environment string `json:"environment" jsonschema:"the environment's id"`
	Path        string `json:"path,omitempty" jsonschema:"the folder (default: the working folder)"`
}

type logArgs struct {
	Environment string `json:"environment" jsonschema:"the environment's id"`
	MaxBytes    int    `json:"max_bytes,omitempty" jsonschema:"return at most the last this many bytes (default 65536)"`
}

// Logs is what read_logs returns.
type Logs struct {
	Log       string `json:"log" jsonschema:"what the environment's main command printed, and the node's lines about it ([envlease ...])"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"only the end of the log is here"`
}

type previewArgs struct {
	Environment string `json:"environment" jsonschema:"the environment's id"`
	Export      string `json:"export,omitempty" jsonschema:"the service's name (default: its only one)"`
	Expires     string `json:"expires,omitempty" jsonschema:"how long the link opens, such as 1h (default: the service's)"`
}

// PreviewLink is what preview_link returns.
type PreviewLink struct {
	URL     string `json:"url" jsonschema:"open it in a browser, or fetch it: whoever holds it reaches the service until it expires"`
	Export  string `json:"export"`
	Expires string `json:"expires"`
}

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_templates", Title: "List templates",
		Description: "List the templates this token can lease: each one's name, runtime, image, working folder, services and timeouts. Call it first to choose a template for lease.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, templateList, error) {
			tl, err := s.api.Templates(ctx)
			if err != nil {
				return nil, templateList{}, toolError("list templates", err)
			}
			out := templateList{Templates: []Template{}}
			for _, t := range tl.Templates {
				x := Template{Name: t.Name, Description: t.Description, Runtime: t.Runtime, Workdir: t.Workdir,
					Idle: t.Timeouts.Idle.String(), Hard: t.Timeouts.Hard.String()}
				if x.Runtime == "" {
					x.Runtime = "process"
				}
				if t.Image != nil {
					x.Image = t.Image.Ref
				}
				for name := range t.Exports {
					x.Exports = append(x.Exports, name)
				}
				slices.Sort(x.Exports)
				out.Templates = append(out.Templates, x)
			}
			return nil, out, nil
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "lease", Title: "Lease an environment",
		Description: "Lease a new environment from a template and wait until it is ready, so that commands and files work in it at once. It is deleted when this session ends, unless keep is true; it also ends on its own when unused for its idle timeout. Returns its id, which the other tools take."},
		func(ctx context.Context, req *mcp.CallToolRequest, in leaseArgs) (*mcp.CallToolResult, Environment, error) {
			if in.WaitSeconds < 0 || time.Duration(in.WaitSeconds)*time.Second > MaxLeaseWait {
				return nil, Environment{}, fmt.Errorf("lease: wait_seconds must be from 0 to %d", int(MaxLeaseWait.Seconds()))
			}
			// The key lets the client send the lease again when its answer
			// is lost on the way (a 502 or 503), leasing one environment.
			l, err := s.api.Lease(ctx, client.LeaseRequest{Template: in.Template, Name: in.Name,
				Labels: s.leaseLabels(req.Session, in.Labels, in.Keep), IdempotencyKey: "mcp-" + rand.Text()})
			if err != nil {
				s.leaseFailed(req.Session)
				return nil, Environment{}, toolError("lease", err)
			}
			id := l.Environment.ID
			s.leased(req.Session, id, in.Keep)
			wait := DefaultLeaseWait
			if in.WaitSeconds > 0 {
				wait = time.Duration(in.WaitSeconds) * time.Second
			}
			e, err := s.waitReady(ctx, id, wait)
			out := summary(e)
			out.Kept = in.Keep || s.opts.Keep
			if err != nil {
				return nil, out, toolError("lease "+id, err)
			}
			return nil, out, nil
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_environments", Title: "List environments",
		Description: "List the organization's live environments (pending, starting, ready), newest first.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, environmentList, error) {
			p, err := s.api.ListEnvironments(ctx, client.EnvironmentQuery{Limit: 200})
			if err != nil {
				return nil, environmentList{}, toolError("list environments", err)
			}
			out := environmentList{Environments: []Environment{}}
			for _, e := range p.Environments {
				out.Environments = append(out.Environments, summary(e))
			}
			return nil, out, nil
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "run_command", Title: "Run a command",
		Description: "Run a command inside a ready environment, as its user, in its working folder, and return its exit code, stdout and stderr (each cut in the middle to max_output_bytes). Give command (a shell line, run with sh -c) or args (a program and its arguments). A non-zero exit code is a result, not an error.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in runArgs) (*mcp.CallToolResult, RunResult, error) {
			return s.runCommand(ctx, in)
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_file", Title: "Read a file",
		Description: "Read a file of a ready environment, as its user: its content as text (or base64 when it is not UTF-8), from its start up to max_bytes. Paths are absolute from the environment's root or relative to its working folder; paths that leave the environment (.., links out, /proc) are refused.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in readArgs) (*mcp.CallToolResult, FileContent, error) {
			return s.readFile(ctx, in)
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_file", Title: "Write a file",
		Description: "Write a file in a ready environment, as its user, replacing it atomically (missing folders are made). Only where the environment may write: a container's root is read-only but for its working folder, writable paths and /tmp. Set mode 0755 for a script to run.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, envfiles.FileInfo, error) {
			return s.writeFile(ctx, in)
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_files", Title: "List files",
		Description: "List a folder of a ready environment: each entry's name, path, type (file, dir, symlink, other), size, mode and modification time, sorted by name.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in listArgs) (*mcp.CallToolResult, envfiles.FileList, error) {
			p := in.Path
			if p == "" {
				p = "."
			}
			l, err := s.api.Files(in.Environment).List(ctx, p)
			if err != nil {
				return nil, envfiles.FileList{}, toolError("list "+p, err)
			}
			return nil, l, nil
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_logs", Title: "Read the log",
		Description: "Read the end of an environment's log: what its template's main command printed, and the node's lines about it (started, ready, failed: why). Works for ended environments too, which keep their log.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in logArgs) (*mcp.CallToolResult, Logs, error) {
			max := in.MaxBytes
			if max <= 0 || max > MaxOutput {
				max = DefaultLogTail
			}
			tail := newCapped(max, false)
			if _, err := s.api.ReadLogs(ctx, in.Environment, client.LogOptions{}, tail); err != nil {
				return nil, Logs{}, toolError("read the log of "+in.Environment, err)
			}
			// The node's lines are marked with RS; an agent reads them as text.
			log := strings.ReplaceAll(tail.String(), string(logline.Mark), "")
			return nil, Logs{Log: log, Truncated: tail.cut > 0}, nil
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "preview_link", Title: "Make a preview link",
		Description: "Make a preview link: an HTTPS URL that opens one of a ready environment's network services (an export, as list_templates names them) in a browser, for whoever holds it, until it expires.",
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(true)}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in previewArgs) (*mcp.CallToolResult, PreviewLink, error) {
			p, err := s.api.CreatePreview(ctx, in.Environment, in.Export, in.Expires)
			if err != nil {
				return nil, PreviewLink{}, toolError("preview link", err)
			}
			return nil, PreviewLink{URL: p.URL, Export: p.Export, Expires: p.Expires.UTC().Format(time.RFC3339)}, nil
		})

	mcp.AddTool(s.mcp, &mcp.Tool{Name: "delete_environment", Title: "Delete an environment",
		Description: "Delete an environment now: its command is stopped and its files are gone. Use it when done, or to free the template's quota.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in envArg) (*mcp.CallToolResult, Environment, error) {
			e, err := s.api.DeleteEnvironment(ctx, in.Environment)
			if err != nil {
				return nil, Environment{}, toolError("delete "+in.Environment, err)
			}
			s.forget(req.Session, in.Environment)
			return nil, summary(e), nil
		})
}

func ptr[T any](v T) *T { return &v }

// waitReady waits until environment id is ready, or can no longer be.
func (s *Server) waitReady(ctx context.Context, id string, wait time.Duration) (domain.Environment, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		e, err := s.api.WaitReady(ctx, id, client.MaxWait)
		if err != nil {
			if ctx.Err() != nil {
				return e, fmt.Errorf("not ready within %s; it may still become ready (call list_environments)", wait)
			}
			return e, err
		}
		switch e.State {
		case domain.StateReady:
			return e, nil
		case domain.StateFailed, domain.StateStopping, domain.StateStopped:
			why := e.Error
			if why == "" {
				why = e.StopReason
			}
			return e, fmt.Errorf("it is %s: %s (read_logs says more)", e.State, why)
		}
	}
}

func (s *Server) runCommand(ctx context.Context, in runArgs) (*mcp.CallToolResult, RunResult, error) {
	var argv []string
	switch {
	case in.Command != "" && len(in.Args) > 0:
		return nil, RunResult{}, errors.New("give command or args, not both")
	case in.Command != "":
		argv = []string{"sh", "-c", in.Command}
	case len(in.Args) > 0:
		argv = in.Args
	default:
		return nil, RunResult{}, errors.New("give command (a shell line) or args (a program and its arguments)")
	}
	max := in.MaxOutputBytes
	if max <= 0 {
		max = DefaultMaxOutput
	}
	max = min(max, MaxOutput)
	timeout := DefaultCommandTimeout
	if in.TimeoutSeconds > 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout, stderr := newCapped(max, true), newCapped(max, true)
	o := execsession.Options{Command: argv, Stdout: stdout, Stderr: stderr}
	if in.Stdin != "" {
		o.Stdin = strings.NewReader(in.Stdin)
	}
	code, err := execsession.Exec(rctx, s.api, in.Environment, o)
	res := RunResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String(), StdoutTruncated: stdout.cut > 0, StderrTruncated: stderr.cut > 0}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			res.ExitCode, res.TimedOut = -1, true
			return nil, res, nil
		}
		return nil, RunResult{}, toolError("run in "+in.Environment, err)
	}
	return nil, res, nil
}

func (s *Server) readFile(ctx context.Context, in readArgs) (*mcp.CallToolResult, FileContent, error) {
	max := in.MaxBytes
	if max <= 0 {
		max = DefaultMaxRead
	}
	max = min(max, MaxRead)
	rc, fi, err := s.api.Files(in.Environment).Open(ctx, in.Path)
	if err != nil {
		return nil, FileContent{}, toolError("read "+in.Path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(max)))
	if err != nil {
		return nil, FileContent{}, toolError("read "+in.Path, err)
	}
	out := FileContent{Path: in.Path, Size: fi.Size, Truncated: fi.Size > int64(len(b))}
	if utf8.Valid(b) {
		out.Content, out.Encoding = string(b), "utf-8"
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(b), "base64"
	}
	return nil, out, nil
}

func (s *Server) writeFile(ctx context.Context, in writeArgs) (*mcp.CallToolResult, envfiles.FileInfo, error) {
	var data []byte
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
		data = []byte(in.Content)
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, envfiles.FileInfo{}, fmt.Errorf("content is not base64: %v", err)
		}
	default:
		return nil, envfiles.FileInfo{}, fmt.Errorf("encoding %q: want utf-8 or base64", in.Encoding)
	}
	o := client.WriteOptions{Parents: true}
	if in.Mode != "" {
		m, err := envfiles.ParseMode(in.Mode)
		if err != nil {
			return nil, envfiles.FileInfo{}, err
		}
		o.Mode = &m
	}
	fi, err := s.api.Files(in.Environment).Write(ctx, in.Path, bytes.NewReader(data), o)
	if err != nil {
		return nil, envfiles.FileInfo{}, toolError("write "+in.Path, err)
	}
	return nil, fi, nil
}

// capped keeps at most max bytes of what is written: with head, the first
// half and the last half (the middle cut), else the last max bytes.
type capped struct {
	max  int
	head bool
	h    []byte
	tail []byte
	cut  int64
}

func newCapped(max int, head bool) *capped { return &capped{max: max, head: head} }

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if c.head && len(c.h) < c.max/2 {
		k := min(c.max/2-len(c.h), len(p))
		c.h = append(c.h, p[:k]...)
		p = p[k:]
	}
	keep := c.max
	if c.head {
		keep = c.max - c.max/2
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - keep; over > 0 {
		c.cut += int64(over)
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
	return n, nil
}

func (c *capped) String() string {
	if c.cut == 0 {
		return string(c.h) + string(c.tail)
	}
	if c.head {
		return string(c.h) + fmt.Sprintf("\n[... %d bytes cut ...]\n", c.cut) + string(c.tail)
	}
	return string(c.tail)
}
