package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
)

// The exit codes scripts can rely on; `envlease help exit-codes` lists them.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitAuth     = 3
	exitNotFound = 4
	exitQuota    = 5
	exitTimeout  = 6
	// exitInterrupted is the shell's convention for a command ended by
	// Ctrl-C (128 + SIGINT).
	exitInterrupted = 130
)

const exitCodesHelp = `Exit codes of every envlease command:

  0  success
  1  any other error (a refused request, a failed transfer, a checksum mismatch, …)
  2  usage: an unknown command or flag, a missing or malformed argument
  3  authentication: not logged in, the token was refused (401), the token may
     not do this (403), or too many failed attempts from this address (429 locked)
  4  not found: no such resource in your organization (404), or it is gone (410:
     an expired artifact, a stopped environment that can no longer be touched)
  5  quota or budget: the organization runs as many environments of the template
     as its quota allows (429 quota; delete one first), or a budget of the
     lease's scope is spent (429 budget; see 'envlease budgets ls')
  6  timeout: --timeout passed, or a wait (lease --wait) ran out
130  interrupted (Ctrl-C or SIGTERM)

'envlease run' exits with its command's exit code once the command ran (128
plus the signal's number when a signal ended it), and with the codes above
when it could not run it, when it was interrupted (130), and when the
environment ended under the command (4). 'envlease exec' and 'envlease shell'
exit with the code of the command they ran inside the environment, likewise, and
with the codes above when it did not run.

Errors are written to standard error; with -o json as one JSON object:
{"error", "code", "status", "requestId", "exitCode"}.
`

func newExitCodesTopic() *cobra.Command {
	return &cobra.Command{
		Use:   "exit-codes",
		Short: "What the exit codes of envlease mean",
		Long:  exitCodesHelp,
	}
}

// usageError is a mistake in how a command was called (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// authError is a missing login (exit 3).
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }

// codedError is an error whose exit code was decided where it happened.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// commandExit is the exit code of the command 'envlease run' ran, which
// envlease exits with and adds nothing to: the command spoke for itself.
type commandExit struct{ code int }

func (e *commandExit) Error() string { return fmt.Sprintf("the command exited with status %d", e.code) }

// errTimedOut is a wait that ran out before what it waited for happened.
var errTimedOut = errors.New("timed out")

// exitCode classifies an error.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	var ae *authError
	var ne net.Error
	var ce *codedError
	var cx *commandExit
	switch {
	case errors.As(err, &cx):
		return cx.code
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ae):
		return exitAuth
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errTimedOut), errors.As(err, &ne) && ne.Timeout():
		return exitTimeout
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	}
	e, ok := client.AsError(err)
	if !ok {
		return exitError
	}
	switch {
	case e.Status == http.StatusUnauthorized, e.Status == http.StatusForbidden:
		return exitAuth
	case e.Status == http.StatusTooManyRequests && e.Code == "locked":
		return exitAuth
	case e.Status == http.StatusTooManyRequests && (e.Code == "quota" || e.Code == "budget"):
		return exitQuota
	case e.Status == http.StatusNotFound, e.Status == http.StatusGone:
		return exitNotFound
	}
	return exitError
}
