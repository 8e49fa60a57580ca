package environments_test

import (
	"context"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// A token restricted to a template reaches only environments of that
// template: it can neither touch, delete, tunnel into, run a command in,
// read the log of, nor checkpoint another template's environment of its
// organization, though its holder could.
func TestRestrictionsReachOnlyTheirEnvironments(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	svc := environments.NewService(e.Store, e.Clock)
	other := lease(t, e, apitest.BobToken, `{"template":"shell"}`).Environment["id"].(string)
	own := lease(t, e, apitest.BobToken, `{"template":"sleeper"}`).Environment["id"].(string)
	ci := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember, Credential: domain.CredentialCLI,
		Restrictions: &domain.Restrictions{Templates: []string{"sleeper"}}}

	refused := func(what string, err error) {
		t.Helper()
		if domain.ErrorCode(err) != domain.CodeRestricted {
			t.Errorf("%s of another template's environment: %v, want restricted", what, err)
		}
	}
	_, err := svc.Touch(ctx, ci, other)
	refused("touch", err)
	_, err = svc.Tunnel(ctx, ci, other)
	refused("tunnel", err)
	_, err = svc.Exec(ctx, ci, other, environments.ExecRequest{Command: []string{"true"}})
	refused("exec", err)
	_, err = svc.Logs(ctx, ci, other)
	refused("logs", err)
	_, err = svc.Checkpoint(ctx, ci, other, environments.CheckpointRequest{})
	refused("checkpoint", err)
	_, err = svc.Delete(ctx, ci, other)
	refused("delete", err)
	if got, err := svc.Get(ctx, ci, other); err != nil || got.State != domain.StatePending {
		t.Fatalf("the refusals changed it: %v %v", got.State, err)
	}

	// Its own kind of environment it acts on as before.
	if _, err := svc.Touch(ctx, ci, own); err != nil {
		t.Errorf("touch of its own template's environment: %v", err)
	}
	if got, err := svc.Delete(ctx, ci, own); err != nil || got.State.Live() {
		t.Errorf("delete of its own template's environment: %v %v", got.State, err)
	}
}
