package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// mcpSession starts `envlease mcp args...` (the real binary, logged in as
// u) and connects the MCP Go SDK's own client to it over stdio, as an MCP
// host does.
func mcpSession(t *testing.T, ctx context.Context, u *user, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"mcp"}, args...)...)
	cmd.Dir = u.home
	cmd.Env = append([]string{"HOME=" + u.home, "XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"), "PATH=" + os.Getenv("PATH")}, u.env...)
	cmd.Stderr = os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to envlease mcp: %v", err)
	}
	return cs
}

// call calls a tool and decodes its structured result into out; it fails
// the test on a tool error unless wantErr, and returns the error's text.
func call(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError {
		return text
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", name, err, b)
		}
	}
	return ""
}

// A whole MCP session driven by a client that is not ours (the MCP Go
// SDK's, over stdio, as a host runs `envlease mcp`): the tools and their
// schemas are listed; lease waits for ready; a script written with
// write_file runs with run_command and its output is read back with
// read_file; errors come back as tool errors naming the API's code and
// the files reason; and when the session ends the environment it leased
// is deleted, but not the one leased with keep: true.
func TestMCPSession(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", boxTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cs := mcpSession(t, ctx, u)

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tl.Name)
		}
	}
	for _, want := range []string{"list_templates", "lease", "list_environments", "run_command", "read_file", "write_file", "list_files", "read_logs", "preview_link", "delete_environment"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("no tool %s among %v", want, names)
		}
	}

	var tl struct {
		Templates []struct{ Name string } `json:"templates"`
	}
	call(t, ctx, cs, "list_templates", map[string]any{}, &tl)
	if len(tl.Templates) == 0 {
		t.Fatal("list_templates: none")
	}
	var env struct{ ID, State string }
	if msg := call(t, ctx, cs, "lease", map[string]any{"template": "box"}, &env); msg != "" || env.State != "ready" {
		t.Fatalf("lease: %s %+v", msg, env)
	}
	var kept struct{ ID, State string }
	call(t, ctx, cs, "lease", map[string]any{"template": "box", "keep": true}, &kept)

	call(t, ctx, cs, "write_file", map[string]any{"environment": env.ID, "path": "hello.sh", "mode": "0755",
		"content": "#!/bin/sh\necho \"hello $1\" > out.txt\necho done\necho warned >&2\nexit 3\n"}, nil)
	var run struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	call(t, ctx, cs, "run_command", map[string]any{"environment": env.ID, "command": "./hello.sh world"}, &run)
	if run.ExitCode != 3 || run.Stdout != "done\n" || run.Stderr != "warned\n" {
		t.Errorf("run_command: %+v", run)
	}
	var file struct{ Content, Encoding string }
	call(t, ctx, cs, "read_file", map[string]any{"environment": env.ID, "path": "out.txt"}, &file)
	if file.Content != "hello world\n" || file.Encoding != "utf-8" {
		t.Errorf("read_file: %+v", file)
	}
	var list struct {
		Entries []struct{ Name string } `json:"entries"`
	}
	call(t, ctx, cs, "list_files", map[string]any{"environment": env.ID}, &list)
	if len(list.Entries) < 2 {
		t.Errorf("list_files: %+v", list)
	}
	var logs struct{ Log string }
	call(t, ctx, cs, "read_logs", map[string]any{"environment": env.ID}, &logs)
	if !strings.Contains(logs.Log, "ready") {
		t.Errorf("read_logs: %q", logs.Log)
	}
	// Errors are tool errors an agent can act on: the code, the reason.
	if msg := call(t, ctx, cs, "read_file", map[string]any{"environment": env.ID, "path": "../../etc/passwd"}, nil); !strings.Contains(msg, "outside_root") {
		t.Errorf("read_file of ../../etc/passwd: %q", msg)
	}
	if msg := call(t, ctx, cs, "run_command", map[string]any{"environment": "env_nosuch", "command": "true"}, nil); !strings.Contains(msg, "not_found") {
		t.Errorf("run_command in no environment: %q", msg)
	}
	if msg := call(t, ctx, cs, "lease", map[string]any{"template": "nosuch"}, nil); !strings.Contains(msg, "invalid") {
		t.Errorf("lease of no template: %q", msg)
	}
	if msg := call(t, ctx, cs, "run_command", map[string]any{"environment": env.ID}, nil); msg == "" {
		t.Error("run_command without a command: no error")
	}

	// The session ends: what it leased is deleted, what it kept is not.
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	c, err := client.New(s.URL, clienttest.BobToken)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		e, err := c.GetEnvironment(ctx, env.ID)
		if err == nil && (e.State == domain.StateStopping || e.State == domain.StateStopped) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's environment is %s after the session ended (%v)", e.State, err)
		}
	}
	if e, err := c.GetEnvironment(ctx, kept.ID); err != nil || e.State != domain.StateReady {
		t.Errorf("the kept environment: %s %v", e.State, err)
	}
}
