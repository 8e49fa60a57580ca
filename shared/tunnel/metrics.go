package tunnel

import "strings"

// MetricsPath is where an agent serves environments' live metrics, beside
// tunnels and logs on the same endpoint, to holders of a ticket of kind
// metrics.
const MetricsPath = "/metrics"

// MetricsURL is the live metrics URL of the agent whose tunnel URL is u;
// "" when u is not one.
func MetricsURL(u string) string {
	l := LogsURL(u)
	if l == "" {
		return ""
	}
	return strings.TrimSuffix(l, LogsPath) + MetricsPath
}
