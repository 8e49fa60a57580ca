package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/sharepack"
)

// shareMargin is how long a share's archive outlives the longest the lease
// can run: the node downloads it when it claims the environment, which may
// be a while after the lease when the pool is busy.
const shareMargin = time.Hour

// maxArtifactLife is the longest an artifact may live (the API's bound).
const maxArtifactLife = 90 * 24 * time.Hour

// shareArg is one --share NAME=DIR.
type shareArg struct{ name, dir string }

// parseShares reads --share NAME=DIR values; each names a share once.
func parseShares(vals []string) ([]shareArg, error) {
	var out []shareArg
	for _, v := range vals {
		name, dir, ok := strings.Cut(v, "=")
		if !ok || name == "" || dir == "" {
			return nil, usagef("--share %q: want NAME=DIR, a share of the template and a local folder", v)
		}
		if slices.ContainsFunc(out, func(s shareArg) bool { return s.name == name }) {
			return nil, usagef("--share %q: share %s is given twice", v, name)
		}
		out = append(out, shareArg{name: name, dir: dir})
	}
	return out, nil
}

// findTemplate reads the organization's template name; empty name picks the
// only one, if there is exactly one.
func findTemplate(ctx context.Context, c *client.Client, name string) (domain.Template, error) {
	list, err := c.Templates(ctx)
	if err != nil {
		return domain.Template{}, err
	}
	names := make([]string, 0, len(list.Templates))
	for _, t := range list.Templates {
		if t.Name == name || (name == "" && len(list.Templates) == 1) {
			return t, nil
		}
		names = append(names, t.Name)
	}
	if name == "" {
		return domain.Template{}, usagef("give --template: your organization has %d templates (%s)", len(names), strings.Join(names, ", "))
	}
	if s := nearest(name, names); s != "" {
		return domain.Template{}, fmt.Errorf("template %q is not one of your organization's (%s); did you mean --template %s?", name, strings.Join(names, ", "), s)
	}
	return domain.Template{}, fmt.Errorf("template %q is not one of your organization's (%s)", name, strings.Join(names, ", "))
}

// uploadShares packs each --share folder, with the template share's exclude
// patterns and --exclude's applied (the service's rule, domain.Excluded),
// into a tar.zst, pushes it as an artifact that lives as long as the lease
// can (hard + shareMargin), and returns the lease's shares naming them. The
// file names go along for display when all of them fit the lease's budget.
func (a *app) uploadShares(ctx context.Context, c *client.Client, t domain.Template, hard string, shares []shareArg, exclude []string, noIgnore bool) ([]client.ShareRequest, error) {
	if len(shares) == 0 {
		return nil, nil
	}
	life := t.Timeouts.Hard.Std()
	if hard != "" {
		d, err := domain.ParseDuration(hard)
		if err != nil {
			return nil, usagef("--hard %q: %v", hard, err)
		}
		life = d.Std()
	}
	expires := domain.Duration(min(life+shareMargin, maxArtifactLife).Round(time.Second)).String()

	listings := make([]sharepack.Listing, len(shares))
	var reqs []client.ShareRequest
	names, nameBytes := 0, 0
	for i, sh := range shares {
		idx := slices.IndexFunc(t.Shares, func(ts domain.TemplateShare) bool { return ts.Name == sh.name })
		if idx < 0 {
			have := make([]string, 0, len(t.Shares))
			for _, ts := range t.Shares {
				have = append(have, ts.Name)
			}
			return nil, usagef("--share %s=%s: template %q has no share %q (its shares: %s)", sh.name, sh.dir, t.Name, sh.name, orDash(strings.Join(have, ", ")))
		}
		l, err := sharepack.List(sh.dir, append(slices.Clone(t.Shares[idx].Exclude), exclude...), sharepack.Options{NoIgnore: noIgnore})
		if err != nil {
			return nil, usagef("--share %s=%s: %v", sh.name, sh.dir, err)
		}
		listings[i] = l
		r := client.ShareRequest{Name: sh.name, LocalPath: l.Dir, Files: l.Names()}
		names += len(r.Files)
		for _, f := range r.Files {
			nameBytes += len(f)
		}
		reqs = append(reqs, r)
	}
	if names > environments.MaxShareFiles || nameBytes > environments.MaxShareFileBytes {
		// The names are for display only; the archives carry the files.
		a.say("All %d files are sent, but the environment's details will not list their names: they list at most %d (%s of names).",
			names, environments.MaxShareFiles, size(environments.MaxShareFileBytes))
		for i := range reqs {
			reqs[i].Files = nil
		}
	}
	for i, sh := range shares {
		id, err := a.pushShare(ctx, c, sh.name, listings[i], expires)
		if err != nil {
			return nil, err
		}
		reqs[i].Artifact = id
	}
	return reqs, nil
}

// pushShare packs one listing into a temporary file and pushes it.
func (a *app) pushShare(ctx context.Context, c *client.Client, name string, l sharepack.Listing, expires string) (string, error) {
	left := ""
	if l.Ignored > 0 {
		paths := "paths"
		if l.Ignored == 1 {
			paths = "path"
		}
		left = fmt.Sprintf(" (%d %s left out: .git, what .gitignore, .envleaseignore and excludes match; --no-ignore sends all)", l.Ignored, paths)
	}
	a.say("Packing share %s from %s: %d files, %s%s.", name, l.Dir, l.Files, size(l.Bytes), left)
	for _, s := range l.Skipped {
		a.say("  left out %s: %s", s.Path, s.Why)
	}
	tmp, err := os.CreateTemp("", "envlease-share-*.tar.zst")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	pack, packed := a.progress("pack "+name, l.Bytes)
	err = sharepack.Write(tmp, l, func(done, total int64) {
		if pack != nil {
			pack(done, total)
		}
	})
	packed()
	if err != nil {
		return "", fmt.Errorf("share %s: %w", name, err)
	}
	info, err := tmp.Stat()
	if err != nil {
		return "", err
	}
	upload, uploaded := a.progress("upload "+name, info.Size())
	art, err := c.Push(ctx, tmp, info.Size(), client.ArtifactCreate{
		Name: "share-" + name + ".tar.zst", ContentType: sharepack.ContentType,
		Labels: map[string]string{"envlease.share": name}, Expires: expires,
	}, client.PushOptions{Progress: upload})
	uploaded()
	if err != nil {
		return "", fmt.Errorf("upload share %s: %w", name, err)
	}
	a.say("Uploaded share %s as %s (%s packed, expires in %s).", name, art.ID, size(art.Size), expires)
	return art.ID, nil
}
