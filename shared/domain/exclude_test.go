package domain

import "testing"

func TestExcluded(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		file     string
		want     bool
	}{
		{[]string{"*.log"}, "debug.log", true},
		{[]string{"*.log"}, "a/b/debug.log", true},
		{[]string{"*.log"}, "logs/readme.txt", false},
		{[]string{"node_modules"}, "node_modules", true},
		{[]string{"node_modules"}, "web/node_modules/x/y.js", true},
		{[]string{"node_modules"}, "node_modules_backup/x", false},
		{[]string{"build/out"}, "build/out/bin", true},
		{[]string{"build/out"}, "src/build/out", false}, // a path pattern matches from the share's root
		{[]string{"./a"}, "a", false},                   // patterns are matched as written
		{[]string{"[", "*.tmp"}, "x.tmp", true},
		{[]string{"["}, "[", false}, // a malformed pattern matches nothing
		{nil, "anything", false},
	} {
		if got := Excluded(tc.patterns, tc.file); got != tc.want {
			t.Errorf("Excluded(%q, %q) = %v, want %v", tc.patterns, tc.file, got, tc.want)
		}
	}
}
