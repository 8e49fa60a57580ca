package tunnel

import (
	"net/url"
	"strings"
)

// LogsPath is where an agent serves live logs, beside tunnels on the same
// endpoint, to holders of a ticket of kind logs.
const LogsPath = "/logs"

// LogsURL is the live logs URL of the agent whose tunnel URL is u (ws:// or
// wss://, path Path): the same endpoint over plain HTTP(S). "" when u is
// not one.
func LogsURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return ""
	}
	switch p.Scheme {
	case "ws":
		p.Scheme = "http"
	case "wss":
		p.Scheme = "https"
	case "http", "https":
	default:
		return ""
	}
	p.Path = strings.TrimSuffix(strings.TrimSuffix(p.Path, "/"), Path) + LogsPath
	p.RawQuery, p.Fragment = "", ""
	return p.String()
}
