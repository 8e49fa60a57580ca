package store

import (
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/expiry"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/sandboxes"
	"github.com/envlease/envlease/shared/templates"
	"github.com/envlease/envlease/shared/timeouts"
	"github.com/envlease/envlease/shared/usage"
)

// The store is the one implementation of every service's Store interface.
var (
	_ auth.Store         = (*Store)(nil)
	_ keys.Store         = (*Store)(nil)
	_ fixture.Store      = (*Store)(nil)
	_ fixture.PruneStore = (*Store)(nil)
	_ environments.Store = (*Store)(nil)
	_ sandboxes.Store    = (*Store)(nil)
	_ templates.Store    = (*Store)(nil)
	_ artifacts.Store    = (*Store)(nil)
)

// The scheduled jobs and the usage report read and write through the same store.
var (
	_ timeouts.Store = (*Store)(nil)
	_ expiry.Store   = (*Store)(nil)
	_ usage.Store    = (*Store)(nil)
)

var _ nodes.Store = (*Store)(nil)
