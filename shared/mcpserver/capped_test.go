package mcpserver

import (
	"strings"
	"testing"
)

// A command's output is kept within its bound: whole when it fits; else
// its start and its end with the cut said (run_command), or its end alone
// (read_logs), however it is written.
func TestCappedOutput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    int
		head   bool
		writes []string
		want   string
		cut    int64
	}{
		{"fits", 10, true, []string{"abc", "def"}, "abcdef", 0},
		{"head and tail", 6, true, []string{"abcdefghij"}, "abc\n[... 4 bytes cut ...]\nhij", 4},
		{"head and tail, byte by byte", 6, true, strings.Split("abcdefghij", ""), "abc\n[... 4 bytes cut ...]\nhij", 4},
		{"tail only", 4, false, []string{"abc", "defgh"}, "efgh", 4},
		{"exactly the bound", 4, false, []string{"abcd"}, "abcd", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapped(tc.max, tc.head)
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("write %q: %d %v", w, n, err)
				}
			}
			if got := c.String(); got != tc.want || c.cut != tc.cut {
				t.Errorf("got %q (cut %d), want %q (cut %d)", got, c.cut, tc.want, tc.cut)
			}
		})
	}
}
