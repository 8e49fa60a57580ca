package httpapi

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// statusOf is the one table from application error code to HTTP status.
var statusOf = map[domain.Code]int{
	domain.CodeBadRequest:        http.StatusBadRequest,
	domain.CodeUnauthorized:      http.StatusUnauthorized,
	domain.CodeForbidden:         http.StatusForbidden,
	domain.CodeNotFound:          http.StatusNotFound,
	domain.CodeMethodNotAllowed:  http.StatusMethodNotAllowed,
	domain.CodeConflict:          http.StatusConflict,
	domain.CodeGone:              http.StatusGone,
	domain.CodeTooLarge:          http.StatusRequestEntityTooLarge,
	domain.CodeInvalid:           http.StatusUnprocessableEntity,
	domain.CodeQuota:             http.StatusTooManyRequests,
	domain.CodeBudget:            http.StatusTooManyRequests,
	domain.CodeExecDisabled:      http.StatusForbidden,
	domain.CodeLocked:            http.StatusTooManyRequests,
	domain.CodeUnavailable:       http.StatusServiceUnavailable,
	domain.CodeWaking:            http.StatusServiceUnavailable,
	domain.CodeNoNode:            http.StatusServiceUnavailable,
	domain.CodeInternal:          http.StatusInternalServerError,
	domain.CodeInsufficientScope: http.StatusForbidden,
	domain.CodeRestricted:        http.StatusForbidden,
}

// Status returns the HTTP status of an application error code.
func Status(code domain.Code) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Field names the request field at fault, where there is one.
	Field string `json:"field,omitempty"`
}

// WriteError writes err as {"error","code"}. Only the client-safe message of an
// application error is sent; causes are logged with the request id.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	e := domain.AsError(err)
	status := Status(e.Code)
	if e.Err != nil || status >= 500 {
		level := slog.LevelWarn
		if status == http.StatusInternalServerError {
			level = slog.LevelError
		}
		log.Log(r.Context(), level, "request failed", "code", e.Code, "err", err.Error())
	}
	retry := e.RetryAfter
	if retry == 0 && e.Code == domain.CodeUnavailable {
		retry = 2 * time.Second
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
	}
	if status == http.StatusUnauthorized {
		challenge := bearerChallenge(r.Header.Get("Authorization"))
		if e.Message == domain.MsgTokenExpired && challenge != "Bearer" {
			// An expired token is told so, not just that it is invalid.
			challenge += `, error_description="` + domain.MsgTokenExpired + `"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
	}
	if e.Code == domain.CodeInsufficientScope {
		w.Header().Set("WWW-Authenticate", scopeChallenge(e.Message))
	}
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	WriteJSON(w, status, ErrorBody{Error: msg, Code: string(e.Code), Field: e.Field})
}

// bearerChallenge is the WWW-Authenticate value of a 401 (RFC 6750 section 3).
// A request that offered a bearer token learns that the token is the problem;
// one that offered none (or another scheme) gets the bare challenge, without
// an error code, as the RFC asks.
func bearerChallenge(authorization string) string {
	const scheme = "Bearer"
	a := strings.TrimSpace(authorization)
	if len(a) > len(scheme) && strings.EqualFold(a[:len(scheme)], scheme) && (a[len(scheme)] == ' ' || a[len(scheme)] == '\t') &&
		strings.TrimSpace(a[len(scheme):]) != "" {
		return `Bearer error="invalid_token"`
	}
	return "Bearer"
}
