package domain

import (
	"path"
	"strings"
)

// Excluded reports whether the share file f (relative, slash-separated)
// matches one of patterns (path.Match syntax) by its base name, its full
// path, or any leading folder, so "*.log" drops logs everywhere and
// "node_modules" a whole folder. A malformed pattern matches nothing. The
// service filters a lease's file names with it and the CLI the files it
// packs, so both drop the same ones.
func Excluded(patterns []string, f string) bool {
	if len(patterns) == 0 {
		return false
	}
	f = path.Clean(f)
	candidates := []string{f, path.Base(f)}
	parts := strings.Split(f, "/")
	for i := 1; i < len(parts); i++ {
		candidates = append(candidates, strings.Join(parts[:i], "/"), parts[i-1])
	}
	for _, p := range patterns {
		for _, c := range candidates {
			if ok, err := path.Match(p, c); err == nil && ok {
				return true
			}
		}
	}
	return false
}
