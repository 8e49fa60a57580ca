package main

import (
	"github.com/spf13/pflag"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// grantFlags are the options of a new token or key: what it may do and
// for how long.
type grantFlags struct {
	scopes, templates, projects, labels []string
	expires                             string
}

func (g *grantFlags) add(f *pflag.FlagSet) {
	f.StringArrayVar(&g.scopes, "scope", nil, "a scope the token may use (repeatable); none: every right you have. Scopes: "+scopeList())
	f.StringVar(&g.expires, "expires", "", "the token's lifetime, such as 1h or 720h (default: none, or the organization's maximum)")
	f.StringArrayVar(&g.templates, "template", nil, "restrict leases to this template (repeatable)")
	f.StringArrayVar(&g.projects, "project", nil, "restrict leases to this project (repeatable)")
	f.StringArrayVar(&g.labels, "require-label", nil, "every lease must set label KEY=VALUE (repeatable)")
}

func scopeList() string {
	out := ""
	for i, s := range domain.AllScopes {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}

// grant turns the flags into the request's grant; the service checks it.
func (g *grantFlags) grant() (client.Grant, error) {
	labels, err := parseLabels(g.labels)
	if err != nil {
		return client.Grant{}, err
	}
	out := client.Grant{Scopes: g.scopes, ExpiresIn: g.expires}
	if len(g.templates) > 0 || len(g.projects) > 0 || len(labels) > 0 {
		out.Restrictions = &domain.Restrictions{Templates: g.templates, Projects: g.projects, Labels: labels}
	}
	return out, nil
}
