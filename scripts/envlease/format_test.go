package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
)

func TestUsageChart(t *testing.T) {
	var b strings.Builder
	usageChart(&b, []client.UsageEntry{
		{Template: "shell", Day: "2026-03-13", Seconds: 5400},
		{Template: "sleeper", Day: "2026-03-13", Seconds: 675},
		{Template: "shell", Day: "2026-03-14", Seconds: 1},
	}, 8)
	want := "" +
		"2026-03-13  shell    ████████ 1h30m\n" +
		"            sleeper  █        11m\n" +
		"2026-03-14  shell    ▏        1s\n"
	if b.String() != want {
		t.Fatalf("chart:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestBar(t *testing.T) {
	cases := []struct {
		v, most int64
		want    string
	}{
		{0, 100, "    "},
		{100, 100, "████"},
		{50, 100, "██  "},
		{60, 100, "██▍ "},
		{1, 1000, "▏   "}, // any time at all shows
		{0, 0, "    "},
	}
	for _, c := range cases {
		if got := bar(c.v, c.most, 4); got != c.want {
			t.Errorf("bar(%d, %d) = %q, want %q", c.v, c.most, got, c.want)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 3, 14, 23, 30, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "", true},
		{"2026-03-01", "2026-03-01", true},
		{"7d", "2026-03-07", true},
		{"0d", "2026-03-14", true},
		{"yesterday", "", false},
		{"-3d", "", false},
		{"2026-3-1", "", false},
	}
	for _, c := range cases {
		got, err := parseSince(c.in, now)
		if (err == nil) != c.ok {
			t.Errorf("%q: error %v", c.in, err)
			continue
		}
		if err != nil {
			if exitCode(err) != exitUsage {
				t.Errorf("%q: exit %d", c.in, exitCode(err))
			}
			continue
		}
		if s := got.Format(time.DateOnly); (c.want == "" && !got.IsZero()) || (c.want != "" && s != c.want) {
			t.Errorf("%q: %v, want %s", c.in, got, c.want)
		}
	}
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 45 * time.Second: "45s", 14*time.Minute + 59*time.Second: "15m", 59*time.Minute + 45*time.Second: "1h",
		2*time.Hour + 5*time.Minute: "2h5m", 6 * time.Hour: "6h",
	} {
		if got := short(d); got != want {
			t.Errorf("short(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestLocalName(t *testing.T) {
	for name, want := range map[string]string{
		"build.tar.gz": "build.tar.gz", "dir/file.txt": "file.txt", "../../etc/passwd": "passwd",
		"..": "art_1", "/": "art_1", "": "art_1",
	} {
		if got := localName(name, "art_1"); got != want {
			t.Errorf("localName(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestExitCodeOfErrors(t *testing.T) {
	apiErr := func(status int, code string) error {
		return fmt.Errorf("wrapped: %w", &client.Error{Status: status, Code: code})
	}
	cases := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitError},
		{usagef("bad flag"), exitUsage},
		{&authError{msg: "not logged in"}, exitAuth},
		{apiErr(401, "unauthorized"), exitAuth},
		{apiErr(403, "forbidden"), exitAuth},
		{apiErr(429, "locked"), exitAuth},
		{apiErr(404, "not_found"), exitNotFound},
		{apiErr(410, "gone"), exitNotFound},
		{apiErr(429, "quota"), exitQuota},
		{apiErr(422, "invalid"), exitError},
		{apiErr(503, "unavailable"), exitError},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), exitTimeout},
		{fmt.Errorf("%w waiting", errTimedOut), exitTimeout},
		{context.Canceled, exitInterrupted},
		{&client.TransferError{Status: 403}, exitError},
	}
	for _, c := range cases {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestParseLabels(t *testing.T) {
	got, err := parseLabels([]string{"team=web", "empty=", "eq=a=b"})
	if err != nil || len(got) != 3 || got["team"] != "web" || got["empty"] != "" || got["eq"] != "a=b" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range [][]string{{"team"}, {"=x"}, {"a=1", "a=2"}} {
		if _, err := parseLabels(bad); exitCode(err) != exitUsage {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
