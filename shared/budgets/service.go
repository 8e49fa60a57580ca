// Package budgets lets admins cap the seconds or cost of environment time of
// the organization, a project, a person or a label value per UTC day or
// month (GET /v1/budgets, PUT and DELETE /v1/budgets/{id}), and runs the
// budget check beside the timeout job (Run): it marks spent budgets, which
// the lease transaction then refuses (429 `budget`), raises the 80 % and
// 100 % events, and stops the live environments of spent hard budgets.
// Docs: usage and budgets.
package budgets

import (
	"context"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/usage"
)

// Store is what budgets need from persistence (store.Store).
type Store interface {
	usage.Reader
	GetUsageSettings(ctx context.Context, org string) (usage.Settings, int64, error)
	GetBudgets(ctx context.Context, org string) (usage.BudgetState, error)
	PutBudgets(ctx context.Context, org string, st usage.BudgetState) error
}

// Service manages budgets.
type Service struct {
	store Store
	clock clock.Clock
}

// NewService returns the budgets service.
func NewService(st Store, clk clock.Clock) *Service { return &Service{store: st, clock: clk} }

// List is the body of GET /v1/budgets.
type List struct {
	Budgets  []usage.Status `json:"budgets"`
	Currency string         `json:"currency,omitempty"`
}

// List returns the organization's budgets with what their current period
// has spent and has left, worked out now; `exhausted` is what leases see
// (set by the last budget run, or by the last change of the budget).
func (s *Service) List(ctx context.Context, p domain.Principal) (List, error) {
	set, _, err := s.store.GetUsageSettings(ctx, p.OrgID)
	if err != nil {
		return List{}, err
	}
	st, err := s.store.GetBudgets(ctx, p.OrgID)
	if err != nil {
		return List{}, err
	}
	statuses, err := usage.Spend(ctx, s.store, p.OrgID, set, st.Budgets, st.Blocked, s.clock.Now())
	if err != nil {
		return List{}, err
	}
	return List{Budgets: statuses, Currency: set.Currency}, nil
}

// Put creates or replaces budget b (admins). A changed budget is judged
// again at once: raising a spent budget's limit lets leases through now,
// not at the next run.
func (s *Service) Put(ctx context.Context, p domain.Principal, b usage.Budget) (usage.Status, error) {
	set, _, err := s.store.GetUsageSettings(ctx, p.OrgID)
	if err != nil {
		return usage.Status{}, err
	}
	if err := b.Validate(set); err != nil {
		return usage.Status{}, err
	}
	st, err := s.store.GetBudgets(ctx, p.OrgID)
	if err != nil {
		return usage.Status{}, err
	}
	kept := st.Budgets[:0]
	for _, x := range st.Budgets {
		if x.ID != b.ID {
			kept = append(kept, x)
		}
	}
	if len(kept) >= usage.MaxBudgets {
		return usage.Status{}, domain.Invalid("id", "an organization may have at most %d budgets", usage.MaxBudgets)
	}
	st.Budgets = append(kept, b)
	forget(&st, b.ID)
	now := s.clock.Now()
	statuses, err := usage.Spend(ctx, s.store, p.OrgID, set, []usage.Budget{b}, nil, now)
	if err != nil {
		return usage.Status{}, err
	}
	out := statuses[0]
	if out.Level() == 100 {
		st.Blocked[usage.BlockKey(b.Scope, usage.PeriodOf(b.Period, now))] = b.ID
		out.Exhausted = true
	}
	if err := s.store.PutBudgets(ctx, p.OrgID, st); err != nil {
		return usage.Status{}, err
	}
	return out, nil
}

// Delete removes budget id (admins); leases it refused are let through at once.
func (s *Service) Delete(ctx context.Context, p domain.Principal, id string) error {
	st, err := s.store.GetBudgets(ctx, p.OrgID)
	if err != nil {
		return err
	}
	kept := st.Budgets[:0]
	for _, x := range st.Budgets {
		if x.ID != id {
			kept = append(kept, x)
		}
	}
	if len(kept) == len(st.Budgets) {
		return domain.NotFound("budget")
	}
	st.Budgets = kept
	forget(&st, id)
	return s.store.PutBudgets(ctx, p.OrgID, st)
}

// forget drops what the runs recorded of budget id.
func forget(st *usage.BudgetState, id string) {
	if st.Blocked == nil {
		st.Blocked = map[string]string{}
	}
	if st.Alerts == nil {
		st.Alerts = map[string]string{}
	}
	for k, v := range st.Blocked {
		if v == id {
			delete(st.Blocked, k)
		}
	}
	delete(st.Alerts, id)
}
