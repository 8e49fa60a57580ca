package runtimes

import (
	"strings"

	"github.com/envlease/envlease/shared/domain"
)

// PortEnv is the environment variable that carries an export's port:
// EXPORT_<SERVICE>_PORT, the service upper-cased with anything but letters
// and digits as '_'.
func PortEnv(service string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(service) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return "EXPORT_" + b.String() + "_PORT"
}

// NamespacePorts gives each export the template's port; one without (0)
// gets the first port from 8000 no other export of the template names, as
// any port is free in a namespace of the environment's own.
func NamespacePorts(t domain.Template, services []string) map[string]int {
	ports := map[string]int{}
	taken := map[int]bool{}
	for _, s := range services {
		if p := t.Exports[s].Port; p > 0 && p < 65536 {
			ports[s] = p
			taken[p] = true
		}
	}
	next := 8000
	for _, s := range services {
		if _, ok := ports[s]; ok {
			continue
		}
		for taken[next] {
			next++
		}
		ports[s], taken[next] = next, true
	}
	return ports
}

// ListenerChecker is what a runtime's Handle implements whose environments
// share the node's ports: readiness then also checks who listens.
type ListenerChecker interface {
	// CheckListener is asked once an export's port accepted a connection.
	CheckListener(port int) error
	// AllReady records that every port was seen held by the environment.
	AllReady()
}

// PortRacer is what a runtime's Handle implements whose environments may
// lose a port to another program of the node between choosing and binding
// it.
type PortRacer interface{ LostPortRace() bool }

// CacheEnv names the build cache's folder, for a template with
// buildCache: /cache in a container, a folder of the node for a process.
const CacheEnv = "ENVLEASE_CACHE"
