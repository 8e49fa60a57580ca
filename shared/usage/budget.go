package usage

import (
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Budget periods.
const (
	PeriodDay   = "day"
	PeriodMonth = "month"
	// MonthLayout is the form of a month period: a UTC calendar month.
	MonthLayout = "2006-01"
)

// Budget limits.
const (
	// MaxBudgets bounds an organization's budgets, which live in one item
	// and are all read by every budget run.
	MaxBudgets = 50
	// ScopeOrg is the scope of a budget on the whole organization.
	ScopeOrg = "org"
)

var budgetIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$`)

// Budget caps the seconds or the cost of environment time of a scope in a
// period (a UTC day or month). A lease in its scope is refused while it is
// spent; a hard budget also stops the scope's live environments at the next
// timeout run.
type Budget struct {
	// ID names it (1-64 of a-z, 0-9, '-', '_'); PUT /v1/budgets/{id}.
	ID string `json:"id"`
	// Scope is "org", "project=P", "user=U" or "label:KEY=VALUE".
	Scope string `json:"scope"`
	// Period is day or month (UTC).
	Period string `json:"period"`
	// Exactly one of Seconds and Cost (in the organization's currency) is set.
	Seconds int64   `json:"seconds,omitempty"`
	Cost    float64 `json:"cost,omitempty"`
	Hard    bool    `json:"hard"`
}

// Status is a budget with how much of it the current period has spent.
type Status struct {
	Budget
	// PeriodStart is the first day of the current period.
	PeriodStart string  `json:"periodStart"`
	Spent       float64 `json:"spent"`
	Remaining   float64 `json:"remaining"`
	// Unit is "seconds" or the currency.
	Unit string `json:"unit"`
	// Spent is true when the budget refuses leases: set by the budget run, so
	// it lags spending by at most one run.
	Exhausted bool `json:"exhausted"`
}

// SplitScope returns a scope's grouping and value: "org" is ("", "").
func SplitScope(scope string) (dim, value string, ok bool) {
	if scope == ScopeOrg {
		return "", "", true
	}
	dim, value, ok = strings.Cut(scope, "=")
	if !ok || dim == DimTemplate || ParseDimension("scope", dim) != nil {
		return "", "", false
	}
	return dim, value, true
}

// Validate checks a budget an admin sends against the organization's
// settings: a scope of a grouping needs the grouping enabled, a cost budget
// needs rates.
func (b Budget) Validate(set Settings) error {
	if !budgetIDPattern.MatchString(b.ID) {
		return domain.Invalid("id", "a budget id is 1-64 characters of a-z, 0-9, '-', '_', starting and ending with a letter or digit")
	}
	dim, value, ok := SplitScope(b.Scope)
	if !ok {
		return domain.Invalid("scope", "scope must be org, project=NAME, user=ID or label:KEY=VALUE, got %q", b.Scope)
	}
	if err := domain.ValidateText("scope", value, 256); err != nil {
		return err
	}
	if strings.HasPrefix(dim, DimLabel) && value == "" {
		return domain.Invalid("scope", "a label budget names the label's value: label:KEY=VALUE")
	}
	if dim != "" && !set.Enabled(dim) {
		return domain.Invalid("scope", "usage is not grouped by %s; enable it in the usage settings first (groupings)", dim)
	}
	if b.Period != PeriodDay && b.Period != PeriodMonth {
		return domain.Invalid("period", "period must be day or month")
	}
	switch {
	case (b.Seconds > 0) == (b.Cost > 0):
		return domain.Invalid("seconds", "set exactly one of seconds and cost, above 0")
	case b.Seconds < 0 || b.Cost < 0 || math.IsNaN(b.Cost) || math.IsInf(b.Cost, 0):
		return domain.Invalid("seconds", "seconds and cost must be above 0")
	case b.Cost > 0 && !set.HasRates():
		return domain.Invalid("cost", "a cost budget needs template rates in the usage settings")
	}
	return nil
}

// Limit is the budget's limit in its unit.
func (b Budget) Limit() float64 {
	if b.Seconds > 0 {
		return float64(b.Seconds)
	}
	return b.Cost
}

// PeriodOf is the period key of t: "2026-11-26" for a day, "2026-11" for a month.
func PeriodOf(period string, t time.Time) string {
	if period == PeriodMonth {
		return t.UTC().Format(MonthLayout)
	}
	return t.UTC().Format(DayLayout)
}

// PeriodStart is the first day of t's period.
func PeriodStart(period string, t time.Time) time.Time {
	d := DayStart(t)
	if period == PeriodMonth {
		return time.Date(d.Year(), d.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return d
}

// ScopesOf are the budget scopes an environment falls in: the organization,
// its project, its person and each of its labels.
func ScopesOf(e domain.Environment) []string {
	out := []string{ScopeOrg, DimProject + "=" + e.Project, DimUser + "=" + e.CreatedBy}
	keys := make([]string, 0, len(e.Labels))
	for k := range e.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, DimLabel+k+"="+e.Labels[k])
	}
	return out
}

// InScope reports whether e falls in scope.
func InScope(e domain.Environment, scope string) bool {
	dim, value, ok := SplitScope(scope)
	if !ok {
		return false
	}
	if dim == "" {
		return true
	}
	if strings.HasPrefix(dim, DimLabel) {
		v, has := e.Labels[strings.TrimPrefix(dim, DimLabel)]
		return has && v == value
	}
	return ValueOf(e, dim) == value
}

// BlockKey names scope spent in period (a PeriodOf value) in the map of
// spent budgets that a lease checks. Periods hold no space, so the first
// space ends the period and keys of different scopes never meet.
func BlockKey(scope, period string) string { return period + " " + scope }

// LeaseBlockKeys are the keys a lease of e at now must not find in the map
// of spent budgets: each of its scopes, in today's and this month's period.
func LeaseBlockKeys(e domain.Environment, now time.Time) []string {
	day, month := PeriodOf(PeriodDay, now), PeriodOf(PeriodMonth, now)
	var out []string
	for _, s := range ScopesOf(e) {
		out = append(out, BlockKey(s, day), BlockKey(s, month))
	}
	return out
}

// BlockedBy returns the id of the budget that blocks a lease of e at now in
// blocked (block key -> budget id), or "".
func BlockedBy(blocked map[string]string, e domain.Environment, now time.Time) string {
	for _, k := range LeaseBlockKeys(e, now) {
		if id, ok := blocked[k]; ok {
			return id
		}
	}
	return ""
}

// BudgetState is an organization's budgets and what the last budget run
// found: Blocked maps the BlockKey of each spent budget to its id (what a
// lease checks), Alerts a budget id to the last alert raised
// ("<period>@80" or "<period>@100"); Version guards the item.
type BudgetState struct {
	Budgets []Budget
	Blocked map[string]string
	Alerts  map[string]string
	Version int64
}
