package budgets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/timeouts"
	"github.com/envlease/envlease/shared/usage"
)

// RunStore is what the budget run needs (store.Store).
type RunStore interface {
	Store
	BudgetOrgs(ctx context.Context) ([]string, error)
	DropBudgetOrg(ctx context.Context, org string) error
	SetBudgetState(ctx context.Context, org string, st usage.BudgetState, events []domain.Event) (bool, error)
	StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error)
}

// Summary is what a budget run did.
type Summary struct {
	Orgs    int `json:"orgs"`
	Budgets int `json:"budgets"`
	// Spent is how many budgets are spent now; Alerts how many 80 % and
	// 100 % events the run raised.
	Spent  int `json:"spent"`
	Alerts int `json:"alerts"`
	// Stopped is how many live environments of spent hard budgets it stopped.
	Stopped int `json:"stopped"`
	Failed  int `json:"failed"`
}

// stopAttempts bounds how often one environment is stopped again after its
// record changed under the run.
const stopAttempts = 5

// Sweep runs the budget check beside the timeout job (timeouts.Sweep).
func Sweep(st RunStore) timeouts.Sweep {
	return func(ctx context.Context, now time.Time) error {
		_, err := Run(ctx, st, now)
		return err
	}
}

// Run judges every budget of every organization that has budgets at now:
// it records which are spent (what leases are refused by) and the alerts
// raised, with their events, in one transaction per organization, and stops
// the live environments in the scope of spent hard budgets with reason
// `budget`. An organization's failure is counted and the run goes on; the
// run is safe to repeat (alerts are raised once per budget, period and level).
func Run(ctx context.Context, st RunStore, now time.Time) (Summary, error) {
	var sum Summary
	orgs, err := st.BudgetOrgs(ctx)
	if err != nil {
		return sum, err
	}
	var errs []error
	for _, org := range orgs {
		if err := runOrg(ctx, st, org, now, &sum); err != nil {
			sum.Failed++
			errs = append(errs, fmt.Errorf("budgets of %s: %w", org, err))
		}
	}
	return sum, errors.Join(errs...)
}

func runOrg(ctx context.Context, st RunStore, org string, now time.Time, sum *Summary) error {
	state, err := st.GetBudgets(ctx, org)
	if err != nil {
		return err
	}
	if len(state.Budgets) == 0 {
		return st.DropBudgetOrg(ctx, org)
	}
	sum.Orgs++
	sum.Budgets += len(state.Budgets)
	set, _, err := st.GetUsageSettings(ctx, org)
	if err != nil {
		return err
	}
	statuses, err := usage.Spend(ctx, st, org, set, state.Budgets, state.Blocked, now)
	if err != nil {
		return err
	}
	blocked := map[string]string{}
	alerts := maps.Clone(state.Alerts)
	if alerts == nil {
		alerts = map[string]string{}
	}
	var events []domain.Event
	var hard []usage.Budget
	for _, s := range statuses {
		b := s.Budget
		period := usage.PeriodOf(b.Period, now)
		level := s.Level()
		if level == 100 {
			blocked[usage.BlockKey(b.Scope, period)] = b.ID
			sum.Spent++
			if b.Hard {
				hard = append(hard, b)
			}
		}
		if level == 0 {
			continue
		}
		mark := period + "@" + strconv.Itoa(level)
		if prev := alerts[b.ID]; prev == mark || prev == period+"@100" {
			continue
		}
		alerts[b.ID] = mark
		typ := domain.EventBudgetWarning
		if level == 100 {
			typ = domain.EventBudgetSpent
		}
		events = append(events, domain.NewEvent(ctx, typ, org, domain.Subject{Kind: "budget", ID: b.ID}, now, map[string]any{
			"budget": b.ID, "scope": b.Scope, "period": b.Period, "periodStart": s.PeriodStart,
			"limit": b.Limit(), "spent": s.Spent, "unit": s.Unit, "percent": level, "hard": b.Hard,
		}))
	}
	// What is worked out now replaces what was recorded: a budget whose
	// limit was raised, or whose period ended, is no longer blocked.
	if !maps.Equal(blocked, state.Blocked) || !maps.Equal(alerts, state.Alerts) {
		state.Blocked, state.Alerts = blocked, alerts
		wrote, err := st.SetBudgetState(ctx, org, state, events)
		if err != nil {
			return err
		}
		if wrote {
			sum.Alerts += len(events)
		}
	}
	if len(hard) == 0 {
		return nil
	}
	return stopHard(ctx, st, org, hard, now, sum)
}

// stopHard stops the live environments of org in the scope of a spent hard
// budget.
func stopHard(ctx context.Context, st RunStore, org string, hard []usage.Budget, now time.Time, sum *Summary) error {
	q := domain.EnvQuery{State: "live", Limit: 200}
	var errs []error
	for {
		page, err := st.ListEnvironments(ctx, org, q)
		if err != nil {
			return err
		}
		for _, e := range page.Environments {
			for _, b := range hard {
				if !usage.InScope(e, b.Scope) {
					continue
				}
				stopped, err := stopOne(ctx, st, e, now)
				if err != nil {
					errs = append(errs, err)
				} else if stopped {
					sum.Stopped++
				}
				break
			}
		}
		if page.Next == "" {
			return errors.Join(errs...)
		}
		q.Cursor = page.Next
	}
}

// stopOne stops e with reason budget, from the current record if it changed
// under the run.
func stopOne(ctx context.Context, st RunStore, e domain.Environment, now time.Time) (bool, error) {
	for range stopAttempts {
		if !e.State.Live() {
			return false, nil
		}
		cur, stopped, err := st.StopEnvironment(ctx, e, timeouts.StopState(e), domain.StopBudget, now)
		if err != nil || stopped {
			return stopped, err
		}
		e = cur
	}
	return false, fmt.Errorf("environment %s kept changing; the next run retries", e.ID)
}
