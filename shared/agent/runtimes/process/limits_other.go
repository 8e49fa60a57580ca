//go:build !linux

package process

import "github.com/envlease/envlease/shared/domain"

// applyResources applies nothing outside Linux: rlimits of another process
// (prlimit) and CPU affinity are Linux calls. It says so.
func applyResources(_ int, r domain.Resources, _ int) []string {
	if r.Memory == "" && r.PIDs == 0 && r.CPUs == 0 {
		return nil
	}
	return []string{"resources are applied on Linux only"}
}
