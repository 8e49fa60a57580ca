package tunnel

import "strings"

// NetLogPath is where an agent serves environments' live network logs,
// beside tunnels and logs on the same endpoint, to holders of a ticket of
// kind netlog.
const NetLogPath = "/netlog"

// NetLogURL is the live network log URL of the agent whose tunnel URL is
// u; "" when u is not one.
func NetLogURL(u string) string {
	l := LogsURL(u)
	if l == "" {
		return ""
	}
	return strings.TrimSuffix(l, LogsPath) + NetLogPath
}
