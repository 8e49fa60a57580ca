// Package preview is a preview link: an environment's web export opened in
// a plain browser, straight at the node that runs it. The API signs a
// token (a tunnel ticket that opens OpenPreview) for one export and one
// host name; the node's endpoint checks it offline, trades it for a cookie
// bound to that host alone and proxies the browser's requests to the
// export. This package holds what both sides share (the host names, the
// cookie's and the query's names) and the node's proxy; it depends on the
// standard library and the ticket only, so the agent and the API function
// share it without pulling in each other's code.
package preview

import (
	"errors"
	"net"
	"strings"
)

// Names the proxy takes for itself. Both are removed from what reaches the
// app: the query parameter by the redirect that trades it for the cookie,
// the cookie from every proxied request's Cookie header.
const (
	// Param is the query parameter a link carries its token in.
	Param = "envlease_preview"
	// Cookie is the cookie the token is traded for.
	Cookie = "envlease_preview"
)

// envPrefix is the prefix of environment ids; the host label carries the
// rest, since DNS names (and certificates) have no underscores.
const envPrefix = "env_"

// maxExport bounds an export's part of the label: a DNS label holds 63
// bytes and the environment's part takes 24.
const maxExport = 38

// ErrExportName is why an export cannot have a preview host name.
var ErrExportName = errors.New("a preview needs an export name of lowercase letters, digits and hyphens, starting with a letter or digit, at most 38 characters")

// Label is the first DNS label of an export's preview host:
// "{export}-{environment id without env_}", for example
// web-19cec2a0e00p4k7a1m9b3c5. The host is Label + "." + the node's
// preview domain.
func Label(export, env string) (string, error) {
	if !validExport(export) {
		return "", ErrExportName
	}
	rest, ok := strings.CutPrefix(env, envPrefix)
	if !ok || !validEnvRest(rest) {
		return "", errors.New("not an environment id")
	}
	return export + "-" + rest, nil
}

// ParseHost reads the export and the environment from a request's Host
// (any port dropped, any case): ok is false for a host that is not a
// preview's, which the endpoint then serves as it did before previews.
func ParseHost(host string) (export, env string, ok bool) {
	label, _, _ := strings.Cut(HostName(host), ".")
	i := strings.LastIndexByte(label, '-')
	if i <= 0 {
		return "", "", false
	}
	export, rest := label[:i], label[i+1:]
	if !validExport(export) || !validEnvRest(rest) {
		return "", "", false
	}
	return export, envPrefix + rest, true
}

// HostName is host without its port, lowercased, for comparing names.
func HostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

func validExport(s string) bool {
	if s == "" || len(s) > maxExport || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validEnvRest accepts what domain.SortableID makes after its prefix: 11
// hex digits of milliseconds and 12 symbols of 0-9a-v.
func validEnvRest(s string) bool {
	if len(s) != 23 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return false
		}
	}
	return true
}
