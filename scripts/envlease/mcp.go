package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/mcpserver"
)

// mcpSessionTimeout ends an HTTP session its client left without a word,
// so the environments it leased are deleted.
const mcpSessionTimeout = 30 * time.Minute

func (a *app) mcpCommand() *cobra.Command {
	var keep bool
	var httpAddr string
	c := &cobra.Command{
		Use:   "mcp [--keep] [--http ADDR]",
		Short: "Serve the Model Context Protocol, for AI agents",
		Long: `Serve envlease's tools to an AI agent over the Model Context Protocol: on
standard input and output (how an MCP host such as Claude Desktop or Claude Code
starts it), or with --http ADDR as streamable HTTP on a loopback address.

The tools act with this profile's token, or ENVLEASE_TOKEN's (give the agent a
scoped one: 'envlease tokens create --scope environments:lease --scope
environments:exec --scope environments:read'): list_templates, lease (waits for
ready), list_environments, run_command, read_file, write_file, list_files,
read_logs, preview_link and delete_environment.

Environments a session leased are deleted when the session ends (its host stops
the server, or an HTTP session is closed or idle for 30 minutes), unless the
server runs with --keep or lease was called with keep: true. See docs/mcp.md.`,
		Example: "  envlease mcp\n  envlease mcp --http 127.0.0.1:8765",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			// The protocol owns standard output: logs go to standard error.
			log := slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			srv := mcpserver.New(s.client, mcpserver.Options{Keep: keep, Version: version(), Log: log})
			if httpAddr == "" {
				return srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopCloser{a.stdout}})
			}
			return a.serveMCP(ctx, srv, httpAddr)
		}),
	}
	c.Flags().BoolVar(&keep, "keep", false, "keep the environments sessions lease when they end")
	c.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP at this loopback address (host:port) instead of standard input and output")
	return c
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// serveMCP serves streamable HTTP at addr until ctx ends. Only loopback:
// whoever reaches the port acts with the token.
func (a *app) serveMCP(ctx context.Context, srv *mcpserver.Server, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--http %q: want host:port", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return usagef("--http %q: only a loopback address (127.0.0.1:PORT): whoever reaches it acts with your token", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() },
		&mcp.StreamableHTTPOptions{SessionTimeout: mcpSessionTimeout, JSONResponse: true})
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	a.say("serving MCP at http://%s/", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	err = hs.Serve(ln)
	srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
