package domain

import (
	"testing"
)

func TestMatchCondition(t *testing.T) {
	for _, c := range []struct {
		cond, value string
		want        bool
	}{
		{"acme/app", "acme/app", true},
		{"acme/app", "acme/app2", false},
		{"refs/heads/*", "refs/heads/main", true},
		{"refs/heads/*", "refs/heads/feature/x", false}, // * does not cross /
		{"refs/heads/*", "refs/tags/v1", false},
		{"release-?", "release-1", true},
		{"[", "[", true}, // a bad pattern still matches itself exactly
		{"[", "x", false},
		{"", "", true},
	} {
		if got := MatchCondition(c.cond, c.value); got != c.want {
			t.Errorf("MatchCondition(%q, %q) = %v, want %v", c.cond, c.value, got, c.want)
		}
	}
}

func TestCheckLease(t *testing.T) {
	r := &Restrictions{Templates: []string{"shell"}, Projects: []string{"web"}, Labels: map[string]string{"ci": "yes"}}
	for _, c := range []struct {
		name, template, project string
		labels                  map[string]string
		field                   string
	}{
		{"allowed", "shell", "web", map[string]string{"ci": "yes", "x": "y"}, ""},
		{"template", "sleeper", "web", map[string]string{"ci": "yes"}, "template"},
		{"project", "shell", "", map[string]string{"ci": "yes"}, "project"},
		{"label missing", "shell", "web", nil, "labels"},
		{"label other value", "shell", "web", map[string]string{"ci": "no"}, "labels"},
	} {
		err := r.CheckLease(c.template, c.project, c.labels)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if e := AsError(err); e.Code != CodeRestricted || e.Field != c.field {
			t.Errorf("%s: %v, want restricted on %s", c.name, err, c.field)
		}
	}
	var none *Restrictions
	if err := none.CheckLease("any", "", nil); err != nil {
		t.Errorf("nil restrictions: %v", err)
	}
}

func TestCapScopesAndRestrictions(t *testing.T) {
	if got, err := CapScopes(nil, []string{ScopeEnvRead}); err != nil || len(got) != 1 || got[0] != ScopeEnvRead {
		t.Errorf("inherit: %v %v", got, err)
	}
	if _, err := CapScopes([]string{ScopeUsageRead}, []string{ScopeEnvRead}); ErrorCode(err) != CodeInsufficientScope {
		t.Errorf("widen: %v", err)
	}
	if got, err := CapScopes([]string{ScopeUsageRead}, nil); err != nil || len(got) != 1 {
		t.Errorf("unscoped caller: %v %v", got, err)
	}
	have := &Restrictions{Templates: []string{"shell"}, Labels: map[string]string{"ci": "yes"}}
	got, err := CapRestrictions(&Restrictions{Projects: []string{"web"}}, have)
	if err != nil || len(got.Templates) != 1 || got.Projects[0] != "web" || got.Labels["ci"] != "yes" {
		t.Errorf("narrow: %+v %v", got, err)
	}
	if _, err := CapRestrictions(&Restrictions{Labels: map[string]string{"ci": "no"}}, have); ErrorCode(err) != CodeRestricted {
		t.Errorf("relabel: %v", err)
	}
	if _, err := NormalizeScopes([]string{ScopeAdmin}, RoleMember); ErrorCode(err) != CodeForbidden {
		t.Errorf("member admin: %v", err)
	}
	if got, err := NormalizeScopes([]string{ScopeEnvRead, ScopeEnvLease, ScopeEnvRead}, RoleMember); err != nil || len(got) != 2 || got[0] != ScopeEnvLease {
		t.Errorf("normalize: %v %v", got, err)
	}
}
