// Package mcpserver is envlease's Model Context Protocol server (envlease
// mcp, docs/mcp.md): tools an AI agent calls to lease environments, run
// commands in them, read and write their files, read their logs, make
// preview links and delete them, on the official Go SDK. It is a thin layer
// over shared/client and shared/execsession, so it reaches exactly what
// the token it holds reaches. Environments a session leased are deleted
// when the session ends, unless it was told to keep them.
package mcpserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// Defaults and bounds of the tools.
const (
	// DefaultLeaseWait is how long lease waits for ready by default, and
	// MaxLeaseWait the most it may be asked to (wait_seconds).
	DefaultLeaseWait = 5 * time.Minute
	MaxLeaseWait     = 10 * time.Minute
	// SessionLabel is the label each environment a session leases (and
	// does not keep) carries, its value the session's own random tag: an
	// environment whose lease answer was lost, so the session never learnt
	// its id, is still found at the session's end and deleted.
	SessionLabel = "envlease.mcp-session"
	// DefaultMaxOutput bounds each of a command's stdout and stderr as
	// run_command returns them, unless the call asks for less or more (up
	// to MaxOutput): an agent's context is not a place for megabytes.
	DefaultMaxOutput = 64 << 10
	MaxOutput        = 4 << 20
	// DefaultMaxRead bounds read_file, and MaxRead is its most.
	DefaultMaxRead = 1 << 20
	MaxRead        = 8 << 20
	// DefaultLogTail is how much of the log read_logs returns.
	DefaultLogTail = 64 << 10
	// DefaultCommandTimeout bounds a command by default.
	DefaultCommandTimeout = 10 * time.Minute
	// cleanupTimeout bounds deleting a session's environments at its end.
	cleanupTimeout = time.Minute
)

// Options configure a server.
type Options struct {
	// Keep keeps every environment sessions lease when they end.
	Keep bool
	// Version is the server's version as clients see it.
	Version string
	Log     *slog.Logger
}

// Server holds the tools and what each session leased.
type Server struct {
	api  *client.Client
	opts Options
	mcp  *mcp.Server

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*leases
	cleanups sync.WaitGroup
}

// leases are the environments one session leased and must delete.
type leases struct {
	ids  []string
	keep map[string]bool
	// tag is the session's SessionLabel value; unsure is set when a lease
	// call failed, so one may have been made whose answer was lost.
	tag    string
	unsure bool
}

// New returns the server of api's token.
func New(api *client.Client, opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{api: api, opts: opts, sessions: map[*mcp.ServerSession]*leases{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "envlease", Title: "envlease", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       opts.Log,
	})
	s.addTools()
	return s
}

const instructions = `envlease leases short-lived environments (sandboxes) from templates.
Call list_templates to see what can be leased, lease to get a ready environment (it
waits), then run_command, write_file, read_file and list_files inside it, read_logs
for what its main command printed, and preview_link for a URL to one of its web
services. Environments leased in this session are deleted when the session ends
unless lease was called with keep: true; delete_environment deletes one at once.
Errors name the API's code (not_found, quota, conflict, forbidden, ...) and, for
files, a reason (outside_root, read_only, permission_denied, ...).`

// MCP is the SDK's server, for a transport of the caller's (tests).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves one session over t (stdio) and deletes what it leased when it
// ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	err := s.mcp.Run(ctx, t)
	s.Close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Close ends every session, deletes what each leased and did not keep, and
// waits for the deletions of sessions that ended before.
func (s *Server) Close() {
	s.mu.Lock()
	var all []*mcp.ServerSession
	for ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		// An HTTP session outlives the server's listener: end it, so its
		// waiter returns.
		if ss != nil {
			_ = ss.Close()
		}
		s.cleanup(ss)
	}
	s.cleanups.Wait()
}

// session returns what session ss leased, the first call making it and
// starting to wait for the session's end, to delete what it leased.
// s.mu is held.
func (s *Server) session(ss *mcp.ServerSession) *leases {
	l := s.sessions[ss]
	if l == nil {
		l = &leases{keep: map[string]bool{}, tag: strings.ToLower(rand.Text()[:16])}
		s.sessions[ss] = l
		if ss != nil {
			s.cleanups.Add(1)
			go func() {
				defer s.cleanups.Done()
				_ = ss.Wait()
				s.cleanup(ss)
			}()
		}
	}
	return l
}

// leaseLabels are labels plus the session's tag, for a lease the session
// will delete; a lease it keeps, or one whose labels are full, has none.
func (s *Server) leaseLabels(ss *mcp.ServerSession, labels map[string]string, keep bool) map[string]string {
	if keep || s.opts.Keep || len(labels) >= domain.MaxLabels {
		return labels
	}
	s.mu.Lock()
	tag := s.session(ss).tag
	s.mu.Unlock()
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[SessionLabel] = tag
	return out
}

// leaseFailed notes that a lease call of session ss failed: at its end the
// session looks for environments with its tag.
func (s *Server) leaseFailed(ss *mcp.ServerSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session(ss).unsure = true
}

// leased records an environment a session leased.
func (s *Server) leased(ss *mcp.ServerSession, id string, keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.session(ss)
	l.ids = append(l.ids, id)
	if keep || s.opts.Keep {
		l.keep[id] = true
	}
}

// forget drops an environment deleted through delete_environment.
func (s *Server) forget(ss *mcp.ServerSession, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.sessions[ss]; l != nil {
		l.keep[id] = true // gone already: nothing to delete
	}
}

// cleanup deletes what session ss leased and did not keep, once.
func (s *Server) cleanup(ss *mcp.ServerSession) {
	s.mu.Lock()
	l := s.sessions[ss]
	delete(s.sessions, ss)
	s.mu.Unlock()
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	ids := l.ids
	if l.unsure {
		ids = append(ids, s.tagged(ctx, l.tag)...)
	}
	done := map[string]bool{}
	for _, id := range ids {
		if l.keep[id] || done[id] {
			continue
		}
		done[id] = true
		if _, err := s.api.DeleteEnvironment(ctx, id); err != nil {
			if e, ok := client.AsError(err); ok && (e.Code == "not_found" || e.Status == 410) {
				continue
			}
			s.opts.Log.Warn("mcp: delete a leased environment at the session's end", "environment", id, "err", err)
			continue
		}
		s.opts.Log.Info("mcp: deleted the session's environment", "environment", id)
	}
}

// tagged lists the live environments that carry the session tag tag.
func (s *Server) tagged(ctx context.Context, tag string) []string {
	var ids []string
	q := client.EnvironmentQuery{Limit: 200}
	for {
		p, err := s.api.ListEnvironments(ctx, q)
		if err != nil {
			s.opts.Log.Warn("mcp: list the session's environments at its end", "err", err)
			return ids
		}
		for _, e := range p.Environments {
			if e.Labels[SessionLabel] == tag {
				ids = append(ids, e.ID)
			}
		}
		if p.Next == "" {
			return ids
		}
		q.Cursor = p.Next
	}
}

// toolError makes err the tool's error, which the SDK returns to the agent
// as a tool result with isError set: the API's message with its code, or
// a files reason.
func toolError(what string, err error) error {
	return fmt.Errorf("%s: %w", what, err)
}
