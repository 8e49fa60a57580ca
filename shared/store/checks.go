package store

import (
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/keys"
)

// The store is the one implementation of every service's Store interface.
var (
	_ auth.Store    = (*Store)(nil)
	_ keys.Store    = (*Store)(nil)
	_ fixture.Store = (*Store)(nil)
)
