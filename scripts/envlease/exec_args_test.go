package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// exec's flags go before or after the environment's id; everything after
// "--" is the command's; without "--" all after the id is the command's.
func TestExecArgs(t *testing.T) {
	cases := []struct {
		args     []string
		cmd      []string
		tty, noS bool
		err      string
	}{
		{args: []string{"env_1", "--", "ls", "-l"}, cmd: []string{"ls", "-l"}},
		{args: []string{"-n", "env_1", "--", "ls"}, cmd: []string{"ls"}, noS: true},
		{args: []string{"env_1", "-n", "--", "ls"}, cmd: []string{"ls"}, noS: true},
		{args: []string{"env_1", "-t", "--", "top"}, cmd: []string{"top"}, tty: true},
		{args: []string{"env_1", "-tn", "--", "top"}, cmd: []string{"top"}, tty: true, noS: true},
		{args: []string{"-t", "env_1", "--no-stdin", "--", "top"}, cmd: []string{"top"}, tty: true, noS: true},
		{args: []string{"env_1", "--", "sh", "-n", "--", "x"}, cmd: []string{"sh", "-n", "--", "x"}},
		{args: []string{"env_1", "sh", "-c", "echo hi"}, cmd: []string{"sh", "-c", "echo hi"}},
		{args: []string{"env_1", "-n", "ls"}, cmd: []string{"-n", "ls"}},
		{args: []string{"env_1"}, err: "give the command"},
		{args: []string{"env_1", "--"}, err: "give the command"},
		{args: []string{"env_1", "ls", "--", "x"}, err: `not "ls"`},
		{args: []string{"env_1", "-x", "--", "ls"}, err: "unknown shorthand flag: 'x'"},
		{args: []string{}, err: "give the environment's id"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			a := &app{getenv: func(string) string { return "" }}
			var cmd *cobra.Command
			for _, s := range a.rootCommand().Commands() {
				if s.Name() == "exec" {
					cmd = s
				}
			}
			f := cmd.Flags()
			if err := f.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			got, err := execArgs(f, f.Args())
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			tty, _ := f.GetBool("tty")
			noS, _ := f.GetBool("no-stdin")
			if err != nil || !slices.Equal(got, c.cmd) || tty != c.tty || noS != c.noS {
				t.Fatalf("got %q, tty %v, no-stdin %v, err %v; want %q, %v, %v", got, tty, noS, err, c.cmd, c.tty, c.noS)
			}
		})
	}
}

func TestNearest(t *testing.T) {
	cases := []struct {
		name string
		of   []string
		want string
	}{
		{"shel", []string{"shell", "sleeper", "warmweb"}, "shell"},
		{"tempalte", []string{"template", "timeout", "share"}, "template"},
		{"wrmweb", []string{"shell", "warmweb"}, "warmweb"},
		{"postgres", []string{"shell", "warmweb"}, ""},
		{"x", []string{"shell"}, ""},
	}
	for _, c := range cases {
		if got := nearest(c.name, c.of); got != c.want {
			t.Errorf("nearest(%q, %q) = %q, want %q", c.name, c.of, got, c.want)
		}
	}
}
