package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/envlease/envlease/shared/client"
)

// nearest is the candidate closest to name by edit distance, when it is
// close enough to be a slip of the fingers (at most one edit in three
// letters, and at least one), and "" otherwise.
func nearest(name string, candidates []string) string {
	best, bestD := "", max(1, len(name)/3)+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(name), strings.ToLower(c)); d < bestD && c != name {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b: insertions,
// deletions and substitutions of one byte each.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var unknownFlag = regexp.MustCompile(`^unknown flag: --([^\s=]+)`)

// flagError turns pflag's error for a mistyped flag into a usage error
// that names the nearest flag the command has.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		var names []string
		add := func(f *pflag.Flag) { names = append(names, f.Name) }
		cmd.Flags().VisitAll(add)
		cmd.InheritedFlags().VisitAll(add)
		if s := nearest(m[1], names); s != "" {
			msg += fmt.Sprintf("; did you mean --%s?", s)
		}
	}
	return &usageError{msg: msg}
}

// templateHint adds to a lease refused for an unknown template the
// nearest of the organization's template names, or the list of them.
func templateHint(ctx context.Context, c *client.Client, name string, err error) error {
	e, ok := client.AsError(err)
	if !ok || e.Field != "template" || !strings.Contains(e.Message, "unknown template") {
		return err
	}
	list, lerr := c.Templates(ctx)
	if lerr != nil || len(list.Templates) == 0 {
		return err
	}
	names := make([]string, 0, len(list.Templates))
	for _, t := range list.Templates {
		names = append(names, t.Name)
	}
	if s := nearest(name, names); s != "" {
		return fmt.Errorf("%w\nDid you mean --template %s? ('envlease templates' lists them.)", err, s)
	}
	return fmt.Errorf("%w\nYour organization's templates: %s ('envlease templates' shows them).", err, strings.Join(names, ", "))
}
