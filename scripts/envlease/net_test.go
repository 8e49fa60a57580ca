package main

import (
	"slices"
	"strings"
	"testing"
)

func TestEditEntries(t *testing.T) {
	for _, c := range []struct {
		cur, entries []string
		remove       bool
		want         []string
	}{
		{nil, []string{"a.test", "b.test"}, false, []string{"a.test", "b.test"}},
		{[]string{"a.test"}, []string{"A.test", "c.test"}, false, []string{"a.test", "c.test"}},
		{[]string{"a.test", "b.test"}, []string{"A.TEST"}, true, []string{"b.test"}},
		{[]string{"a.test"}, []string{"x.test"}, true, []string{"a.test"}},
		{[]string{"a.test"}, []string{"a.test"}, true, []string{}},
	} {
		if got := editEntries(c.cur, c.entries, c.remove); !slices.Equal(got, c.want) {
			t.Errorf("editEntries(%v, %v, %v) = %v, want %v", c.cur, c.entries, c.remove, got, c.want)
		}
	}
}

func TestNetLines(t *testing.T) {
	var b strings.Builder
	w := &netLines{out: &b}
	// A record cut by the ring, a TCP record split across writes, a DNS one.
	in := `ut":1}` + "\n" +
		`{"time":"2026-11-28T10:00:00Z","proto":"tcp","addr":"198.51.100.7","port":443,"name":"github.com","nameFrom":"sni",` +
		`"rule":"allow github.com","verdict":"allow","sent":517,"received":4096,"durationMs":12.5}` + "\n" +
		`{"time":"2026-11-28T10:00:01Z","proto":"dns","name":"evil.test","type":"A","rule":"deny evil.test","verdict":"deny","sent":0,"received":0,"durationMs":0}` + "\n"
	_, _ = w.Write([]byte(in[:40]))
	_, _ = w.Write([]byte(in[40:]))
	w.flush()
	out := b.String()
	for _, want := range []string{"198.51.100.7:443 (github.com, sni)  [allow github.com]  sent 517, received 4096, 12.5 ms", "deny   dns A evil.test  [deny evil.test]"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var j strings.Builder
	w = &netLines{out: &j, json: true}
	_, _ = w.Write([]byte(in))
	if lines := strings.Split(strings.TrimSpace(j.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], `{"time"`) {
		t.Errorf("-o json printed %q, want the two records only", j.String())
	}
}
