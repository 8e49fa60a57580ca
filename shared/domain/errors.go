// Package domain holds the entities of envlease and the one application error
// type. It depends on nothing but the standard library, so every layer can use it.
package domain

import (
	"errors"
	"fmt"
	"time"
)

// Code is the machine-readable error code a client sees in `code`.
type Code string

// The codes of the API. httpapi maps each to one HTTP status.
const (
	CodeBadRequest   Code = "bad_request"
	CodeUnauthorized Code = "unauthorized"
	CodeForbidden    Code = "forbidden"
	// CodeExecDisabled is 403 too: the environment's template turns exec
	// off (exec: false), whoever asks.
	CodeExecDisabled     Code = "exec_disabled"
	CodeNotFound         Code = "not_found"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodeConflict         Code = "conflict"
	CodeGone             Code = "gone"
	CodeTooLarge         Code = "too_large"
	CodeInvalid          Code = "invalid"
	CodeQuota            Code = "quota"
	// CodeBudget: a lease in the scope of a spent budget (429).
	CodeBudget Code = "budget"
	CodeLocked Code = "locked"
	// CodeWaking: the environment was paused and is waking (503 with
	// Retry-After): ask again; docs/environments.md, "Wake on use".
	CodeWaking Code = "waking"
	// CodeNoNode: a waking environment that no active node of its pool can
	// run (503 with Retry-After).
	CodeNoNode      Code = "no_node"
	CodeUnavailable Code = "unavailable"
	CodeInternal    Code = "internal"
	// CodeInsufficientScope: the token lacks the scope the route needs
	// (403); the message and the WWW-Authenticate header name it.
	CodeInsufficientScope Code = "insufficient_scope"
	// CodeRestricted: the token's restrictions refuse this lease (403).
	CodeRestricted Code = "restricted"
)

// Error is the application error. Message is safe to show a client; Err is the
// internal cause, logged but never sent.
type Error struct {
	Code    Code
	Message string
	// Field names the offending request field for bad_request and invalid.
	Field string
	// RetryAfter, when set, becomes the Retry-After header.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an application error with a client-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid reports a well-formed request whose field holds an unacceptable value (422).
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// BadRequest reports a request that is not what the endpoint takes (400).
func BadRequest(field, format string, args ...any) *Error {
	return &Error{Code: CodeBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// NotFound reports a resource absent from the caller's organization.
func NotFound(what string) *Error {
	return &Error{Code: CodeNotFound, Message: what + " not found"}
}

// Unavailable wraps a dependency failure; the client should retry.
func Unavailable(dependency string, cause error) *Error {
	return &Error{Code: CodeUnavailable, Message: dependency + " is unavailable, retry shortly", RetryAfter: 2 * time.Second, Err: cause}
}

// Internal wraps an unexpected failure. Its cause is logged, never shown.
func Internal(cause error) *Error {
	return &Error{Code: CodeInternal, Message: "internal error", Err: cause}
}

// ErrorCode returns the code of err, or CodeInternal when err is not an *Error.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err == nil {
		return ""
	}
	return CodeInternal
}

// AsError returns err as an *Error, wrapping unknown errors as internal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Internal(err)
}
