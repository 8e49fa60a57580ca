package usage

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Query is what GET /v1/usage asks: days since..until (UTC, inclusive),
// grouped by By (template when empty), kept to Filter (DIM=VALUE).
type Query struct {
	Since, Until string
	By           string
	Filter       string
}

// plan is which ledger a query reads and how it groups and filters.
type plan struct {
	from, until time.Time
	by          string
	// source is the grouping whose ledger is read: template (the
	// specification's ledger) or a grouping the organization records.
	source              string
	filterDim, filterOn string
}

// parse checks q at now against the organization's settings. A query can
// group by one dimension and filter by that dimension or by template, or
// group by template and filter by any recorded dimension: each reads one
// ledger, whose items carry their template.
func (q Query) parse(now time.Time, set Settings) (plan, error) {
	from, err := ParseSince(q.Since, now)
	if err != nil {
		return plan{}, err
	}
	today := DayStart(now)
	until := today
	if q.Until != "" {
		if until, err = time.Parse(DayLayout, q.Until); err != nil {
			return plan{}, domain.BadRequest("until", "until must be a date, YYYY-MM-DD (a UTC day)")
		}
		if until.After(today) || until.Before(from) {
			return plan{}, domain.BadRequest("until", "until must be from since (%s) to today (%s)", from.Format(DayLayout), today.Format(DayLayout))
		}
	}
	p := plan{from: from, until: until, by: DimTemplate, source: DimTemplate}
	if q.By != "" {
		if err := ParseDimension("by", q.By); err != nil {
			return plan{}, err
		}
		p.by, p.source = q.By, q.By
	}
	if q.Filter != "" {
		dim, v, ok := strings.Cut(q.Filter, "=")
		if !ok {
			return plan{}, domain.BadRequest("filter", "filter must be DIM=VALUE, e.g. project=web or label:team=payments")
		}
		if err := ParseDimension("filter", dim); err != nil {
			return plan{}, err
		}
		p.filterDim, p.filterOn = dim, v
		switch {
		case dim == DimTemplate || dim == p.by:
		case p.by == DimTemplate:
			p.source = dim
		default:
			return plan{}, domain.BadRequest("filter", "grouped by %s, a filter may be on %s or template; to filter by %s, group by template", p.by, p.by, dim)
		}
	}
	if !set.Enabled(p.source) {
		return plan{}, domain.BadRequest("by", "usage is not recorded by %s; an admin enables it in the usage settings (groupings: %s)", p.source, strings.Join(set.Groupings, ", "))
	}
	return p, nil
}

// row is seconds of one template, value and day, from the ledger or a live
// environment.
type row struct {
	template, value, day string
	seconds              int64
}

// Query answers GET /v1/usage. Everything read is under the caller's
// organization's partition. It costs the settings read, the pages of one
// ledger range query (each up to 1 MB: about 5,000 items) and the pages of
// live environments.
//
// The ledger is read before the live environments. An environment that stops
// between the two reads is then missing from this one answer (it is in the
// next), rather than counted twice.
func (s *Service) Query(ctx context.Context, p domain.Principal, q Query) (Report, error) {
	now := s.clock.Now()
	set, _, err := s.store.GetUsageSettings(ctx, p.OrgID)
	if err != nil {
		return Report{}, err
	}
	pl, err := q.parse(now, set)
	if err != nil {
		return Report{}, err
	}
	rows, err := s.rows(ctx, p.OrgID, pl, now)
	if err != nil {
		return Report{}, err
	}
	out := Report{Since: pl.from, By: q.By, Filter: q.Filter, Usage: []Entry{}}
	if out.Paused, err = s.paused(ctx, p.OrgID); err != nil {
		return Report{}, err
	}
	if q.Until != "" || q.By != "" || q.Filter != "" {
		out.Until = pl.until.Format(DayLayout)
	}
	if pl.source != DimTemplate {
		out.GroupedSince = set.Since[pl.source]
	}
	costed := set.HasRates()
	if costed {
		out.Currency = set.Currency
	}
	type k struct{ day, group string }
	type sum struct {
		seconds int64
		cost    float64
	}
	sums := map[k]*sum{}
	for _, r := range rows {
		switch pl.filterDim {
		case "":
		case DimTemplate:
			if r.template != pl.filterOn {
				continue
			}
		default:
			if r.value != pl.filterOn {
				continue
			}
		}
		g := r.value
		if pl.by == DimTemplate {
			g = r.template
		}
		x := sums[k{r.day, g}]
		if x == nil {
			x = &sum{}
			sums[k{r.day, g}] = x
		}
		x.seconds += r.seconds
		if costed {
			x.cost += set.Cost(r.template, r.day, r.seconds)
		}
	}
	for key, x := range sums {
		if x.seconds <= 0 {
			continue
		}
		e := Entry{Day: key.day, Seconds: x.seconds}
		if pl.by == DimTemplate {
			e.Template = key.group
		}
		if q.By != "" {
			v := key.group
			e.Value = &v
		}
		if costed {
			c := RoundCost(x.cost)
			e.Cost = &c
		}
		out.Usage = append(out.Usage, e)
	}
	sort.Slice(out.Usage, func(i, j int) bool {
		a, b := out.Usage[i], out.Usage[j]
		if a.Day != b.Day {
			return a.Day < b.Day
		}
		return groupOf(a) < groupOf(b)
	})
	return out, nil
}

func groupOf(e Entry) string {
	if e.Value != nil {
		return *e.Value
	}
	return e.Template
}

// rows reads the plan's ledger and adds the live environments it records.
func (s *Service) rows(ctx context.Context, org string, pl plan, now time.Time) ([]row, error) {
	fromDay, untilDay := pl.from.Format(DayLayout), pl.until.Format(DayLayout)
	var rows []row
	if pl.source == DimTemplate {
		stopped, err := s.store.ListUsage(ctx, org, fromDay, untilDay)
		if err != nil {
			return nil, err
		}
		for _, e := range stopped {
			rows = append(rows, row{template: e.Template, value: e.Template, day: e.Day, seconds: e.Seconds})
		}
	} else {
		stopped, err := s.store.ListUsageBy(ctx, org, pl.source, fromDay, untilDay)
		if err != nil {
			return nil, err
		}
		for _, e := range stopped {
			rows = append(rows, row{template: e.Template, value: e.Value, day: e.Day, seconds: e.Seconds})
		}
	}
	err := s.eachLive(ctx, org, func(e domain.Environment) {
		if !Records(e, pl.source) {
			return // its stop will not write this ledger either
		}
		for _, d := range Split(e.RunSince(), now) {
			if d.Day >= fromDay && d.Day <= untilDay {
				rows = append(rows, row{template: e.Template, value: ValueOf(e, pl.source), day: d.Day, seconds: d.Seconds})
			}
		}
	})
	return rows, err
}

// paused sums the paused environments of org by template: one query of
// the paused listing, which holds only paused environments.
func (s *Service) paused(ctx context.Context, org string) ([]PausedEntry, error) {
	by := map[string]*PausedEntry{}
	q := domain.EnvQuery{State: string(domain.StatePaused), Limit: livePage}
	for {
		page, err := s.store.ListEnvironments(ctx, org, q)
		if err != nil {
			return nil, err
		}
		for _, e := range page.Environments {
			x := by[e.Template]
			if x == nil {
				x = &PausedEntry{Template: e.Template}
				by[e.Template] = x
			}
			x.Environments++
			if e.Checkpoint != nil {
				x.Bytes += e.Checkpoint.Size
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	var out []PausedEntry
	for _, x := range by {
		out = append(out, *x)
	}
	slices.SortFunc(out, func(a, b PausedEntry) int { return strings.Compare(a.Template, b.Template) })
	return out, nil
}

// eachLive calls f with every live environment of org.
func (s *Service) eachLive(ctx context.Context, org string, f func(domain.Environment)) error {
	q := domain.EnvQuery{State: "live", Limit: livePage}
	for {
		page, err := s.store.ListEnvironments(ctx, org, q)
		if err != nil {
			return err
		}
		for _, e := range page.Environments {
			f(e)
		}
		if page.Next == "" {
			return nil
		}
		q.Cursor = page.Next
	}
}

// Settings returns the caller's organization's usage settings.
func (s *Service) Settings(ctx context.Context, p domain.Principal) (Settings, error) {
	set, _, err := s.store.GetUsageSettings(ctx, p.OrgID)
	return set, err
}

// PutSettings replaces the organization's usage settings (admins). A
// grouping added now is recorded from today on (its `since`); leases made
// in the next seconds by functions that still hold the old settings may miss
// it, as the docs say.
func (s *Service) PutSettings(ctx context.Context, p domain.Principal, in Settings) (Settings, error) {
	in.Since = nil
	if err := in.Validate(); err != nil {
		return Settings{}, err
	}
	cur, version, err := s.store.GetUsageSettings(ctx, p.OrgID)
	if err != nil {
		return Settings{}, err
	}
	in.Normalize()
	if err := s.keepBudgetedGroupings(ctx, p.OrgID, cur, in); err != nil {
		return Settings{}, err
	}
	today := DayStart(s.clock.Now()).Format(DayLayout)
	for _, g := range in.Groupings {
		if since, ok := cur.Since[g]; ok && cur.Enabled(g) {
			in.Since[g] = since
		} else {
			in.Since[g] = today
		}
	}
	if err := s.store.PutUsageSettings(ctx, p.OrgID, in, version); err != nil {
		return Settings{}, err
	}
	return in, nil
}

// BudgetReader reads an organization's budgets (store.Store): the settings
// consult them before a grouping is turned off.
type BudgetReader interface {
	GetBudgets(ctx context.Context, org string) (BudgetState, error)
}

// keepBudgetedGroupings refuses to turn off a grouping a budget counts by:
// its ledger would no longer be written, and the budget would silently stop
// counting (and blocking). Only a change that turns one off reads the
// budgets.
func (s *Service) keepBudgetedGroupings(ctx context.Context, org string, cur, next Settings) error {
	var dropped []string
	for _, g := range cur.Groupings {
		if !next.Enabled(g) {
			dropped = append(dropped, g)
		}
	}
	br, ok := s.store.(BudgetReader)
	if len(dropped) == 0 || !ok {
		return nil
	}
	st, err := br.GetBudgets(ctx, org)
	if err != nil {
		return err
	}
	for _, b := range st.Budgets {
		if dim, _, _ := SplitScope(b.Scope); slices.Contains(dropped, dim) {
			return domain.Errorf(domain.CodeConflict, "budget %q counts usage by %s: remove or rescope it before turning that grouping off", b.ID, dim)
		}
	}
	return nil
}
