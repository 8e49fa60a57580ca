// Package bytesize reads sizes as templates and the agent's flags write
// them (512Mi, 2G).
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads a size: plain bytes, or with K, M, G, T (powers of 1000)
// or Ki, Mi, Gi, Ti (powers of 1024), as Kubernetes writes them.
func Parse(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	mult := uint64(1)
	num := s
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("not a size such as 512Mi or 2G")
	}
	return n * mult, nil
}

// Format writes n as Parse reads it, in the largest binary unit that
// divides it (10Gi, 512Mi), else in bytes.
func Format(n uint64) string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.suffix)
		}
	}
	return fmt.Sprint(n)
}
