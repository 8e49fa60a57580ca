package usage

import (
	"context"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Reader is what spending needs from persistence (store.Store).
type Reader interface {
	ListUsage(ctx context.Context, org, from, to string) ([]Entry, error)
	ListUsageBy(ctx context.Context, org, dim, from, to string) ([]GroupEntry, error)
	ListEnvironments(ctx context.Context, org string, q domain.EnvQuery) (domain.EnvPage, error)
}

// Spend works out how much of each budget its current period at now has
// spent: stopped environments from the ledgers, live ones up to now, as
// GET /v1/usage counts them. It reads each ledger a budget needs once, from
// the first day of the month (or of today, with only day budgets), and the
// live environments once. blocked is the map of spent budgets leases see.
func Spend(ctx context.Context, r Reader, org string, set Settings, budgets []Budget, blocked map[string]string, now time.Time) ([]Status, error) {
	out := make([]Status, 0, len(budgets))
	if len(budgets) == 0 {
		return out, nil
	}
	from := PeriodStart(PeriodDay, now)
	dims := map[string]bool{}
	for _, b := range budgets {
		if ps := PeriodStart(b.Period, now); ps.Before(from) {
			from = ps
		}
		dim, _, _ := SplitScope(b.Scope)
		dims[dim] = true
	}
	fromDay, today := from.Format(DayLayout), DayStart(now).Format(DayLayout)
	// rows per dimension ("" is the template ledger, for the organization).
	rows := map[string][]row{}
	for dim := range dims {
		if dim == "" {
			stopped, err := r.ListUsage(ctx, org, fromDay, today)
			if err != nil {
				return nil, err
			}
			for _, e := range stopped {
				rows[dim] = append(rows[dim], row{template: e.Template, day: e.Day, seconds: e.Seconds})
			}
			continue
		}
		stopped, err := r.ListUsageBy(ctx, org, dim, fromDay, today)
		if err != nil {
			return nil, err
		}
		for _, e := range stopped {
			rows[dim] = append(rows[dim], row{template: e.Template, value: e.Value, day: e.Day, seconds: e.Seconds})
		}
	}
	q := domain.EnvQuery{State: "live", Limit: livePage}
	for {
		page, err := r.ListEnvironments(ctx, org, q)
		if err != nil {
			return nil, err
		}
		for _, e := range page.Environments {
			for dim := range dims {
				if dim != "" && !Records(e, dim) {
					continue
				}
				v := ""
				if dim != "" {
					v = ValueOf(e, dim)
				}
				for _, d := range Split(e.RunSince(), now) {
					if d.Day >= fromDay {
						rows[dim] = append(rows[dim], row{template: e.Template, value: v, day: d.Day, seconds: d.Seconds})
					}
				}
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	for _, b := range budgets {
		dim, value, _ := SplitScope(b.Scope)
		ps := PeriodStart(b.Period, now).Format(DayLayout)
		var secs int64
		var cost float64
		for _, x := range rows[dim] {
			if x.day < ps || (dim != "" && x.value != value) {
				continue
			}
			secs += x.seconds
			cost += set.Cost(x.template, x.day, x.seconds)
		}
		st := Status{Budget: b, PeriodStart: ps, Unit: "seconds", Spent: float64(secs)}
		if b.Cost > 0 {
			st.Unit, st.Spent = set.Currency, RoundCost(cost)
		}
		st.Remaining = max(0, RoundCost(b.Limit()-st.Spent))
		_, st.Exhausted = blocked[BlockKey(b.Scope, PeriodOf(b.Period, now))]
		out = append(out, st)
	}
	return out, nil
}

// Level is the alert level a status has reached: 100 when spent, 80 from
// 80 % of the limit, 0 below.
func (s Status) Level() int {
	switch l := s.Budget.Limit(); {
	case s.Spent >= l:
		return 100
	case s.Spent >= 0.8*l:
		return 80
	}
	return 0
}
