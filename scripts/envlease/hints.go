package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/envlease/envlease/shared/client"
)

// explain is the message an error is printed with: the service's own
// errors say what to do already; errors of the network and of the client
// side are put in the same terms (what was tried, the likely cause, the
// fix), where Go's text would say only what failed.
func (a *app) explain(err error, code int) string {
	var ue *url.Error
	var dns *net.DNSError
	switch {
	case code == exitInterrupted:
		return "interrupted"
	case errors.As(err, &ue) && refused(err):
		u, _ := url.Parse(ue.URL)
		where := ue.URL
		if u != nil {
			where = origin(u)
		}
		if u != nil && isLocal(u.Hostname()) {
			return fmt.Sprintf("cannot reach the envlease API at %s: connection refused. Is the dev server running ('go run ./scripts/devserver'), and on this address? It listens on 127.0.0.1:8080 unless started with -addr; log in with --url to match.", where)
		}
		return fmt.Sprintf("cannot reach the envlease API at %s: connection refused. Check the URL ('envlease whoami' shows the profile's, ENVLEASE_URL overrides it) and that the service is up.", where)
	case errors.As(err, &dns):
		return fmt.Sprintf("cannot find the host %q of the API URL (%s): check the URL ('envlease whoami' shows the profile's, ENVLEASE_URL overrides it).", dns.Name, dnsText(dns))
	case code == exitTimeout && errors.Is(err, errTimedOut):
		return err.Error()
	case code == exitTimeout:
		return a.timeoutText(err)
	}
	if e, ok := client.AsError(err); ok && e.Status == http.StatusUnauthorized {
		return unauthorizedText(err, e)
	}
	return err.Error()
}

// timeoutText says what was being waited for when --timeout (or a wait of
// envlease's own) ran out.
func (a *app) timeoutText(err error) string {
	limit := "the time allowed"
	if a.timeout > 0 {
		limit = fmt.Sprintf("--timeout %s", a.timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		what := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			what = u.Path
		}
		return fmt.Sprintf("timed out: %s ran out waiting for the answer to %s %s from %s (the request may still take effect; a longer --timeout waits longer)",
			limit, strings.ToUpper(ue.Op), what, originOf(ue.URL))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("timed out: %s ran out before the command finished (a longer --timeout waits longer)", limit)
	}
	return "timed out: " + err.Error()
}

// unauthorizedText keeps the service's reason for a 401 and adds the fix:
// logging in again.
func unauthorizedText(err error, e *client.Error) string {
	msg := err.Error()
	switch {
	case strings.Contains(e.Message, "expired"), strings.Contains(e.Message, "revoked"), strings.Contains(e.Message, "unknown token"):
		return msg + "\nLog in again with a valid token: envlease login --url URL (or set ENVLEASE_TOKEN)."
	case strings.Contains(e.Message, "malformed"):
		return msg + "\nThe token sent is not one envlease issues (they start with els_): log in again with envlease login --url URL."
	}
	return msg
}

func originOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return origin(u)
	}
	return raw
}

func dnsText(e *net.DNSError) string {
	if e.IsNotFound {
		return "no such host"
	}
	return e.Err
}
