package httpapi_test

import (
	"slices"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Every route a token can call is in the scope table, and the table names
// no route that does not exist and no scope outside the documented set.
func TestEveryRouteHasAScope(t *testing.T) {
	e := apitest.New(t, nil)
	table := httpapi.ScopeTable()
	seen := map[string]bool{}
	for _, g := range apitest.AllRoutes(e, nil) {
		for _, rt := range g {
			key := rt.Method + " " + rt.Path
			seen[key] = true
			_, listed := table[key]
			switch rt.Access {
			case httpapi.Member, httpapi.Admin:
				if !listed {
					t.Errorf("%s is not in the scope table", key)
				}
			default:
				if listed {
					t.Errorf("%s takes no scoped token but is in the scope table", key)
				}
			}
			if rt.Access == httpapi.Admin && !domain.IsAdminScope(table[key]) {
				t.Errorf("admin route %s needs %q, want admin or another scope only admins carry", key, table[key])
			}
		}
	}
	for key, scope := range table {
		if !seen[key] {
			t.Errorf("scope table names %s, which no group serves", key)
		}
		if scope != "" && !slices.Contains(domain.AllScopes, scope) {
			t.Errorf("%s needs undocumented scope %q", key, scope)
		}
	}
}
