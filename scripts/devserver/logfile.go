package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/envlease/envlease/shared/platform"
)

// defaultLogFile is where the request log goes unless -log-file says
// otherwise: one JSON line per request drowns a terminal the CLI shares.
func defaultLogFile() string { return filepath.Join(os.TempDir(), "envlease-devserver.log") }

// openLog is the dev server's logger: the JSON log into path (emptied at
// start; "-" is standard error, as before), and warnings and errors also on
// standard error as text, so a failure is seen where the banner is.
func openLog(path, level string, terminal io.Writer) (*slog.Logger, func(), error) {
	if path == "-" {
		return platform.Logger(terminal, level), func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open the log file (-log-file %s): %w", path, err)
	}
	file := platform.Logger(f, level).Handler()
	shown := slog.NewTextHandler(terminal, &slog.HandlerOptions{Level: slog.LevelWarn})
	return slog.New(teeHandler{file, shown}), func() { _ = f.Close() }, nil
}

// teeHandler hands each record to every handler that takes its level.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			errs = append(errs, h.Handle(ctx, r.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (t teeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(attrs)
	}
	return out
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
}
