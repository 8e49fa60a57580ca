// Package usage reports environment time: seconds per template per UTC day
// (GET /v1/usage, spec 2.6). Stopped environments are read from the ledger
// the stop transaction writes (store: ORG#<org> USAGE#<day>#<template>);
// live environments are added up to now, so the report never waits for a stop.
package usage

import (
	"context"
	"sort"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// Store is what the service needs from persistence (store.Store).
type Store interface {
	ListUsage(ctx context.Context, org, from, to string) ([]Entry, error)
	ListEnvironments(ctx context.Context, org string, q domain.EnvQuery) (domain.EnvPage, error)
}

// Limits of `since`. MaxHistory matches how long the ledger keeps its items
// (store.UsageRetention): older days cannot be answered, so asking is a 400
// rather than a silently short report.
const (
	DefaultDays = 30
	MaxHistory  = 400
	// livePage is the page size used to read live environments.
	livePage = 200
)

// Report is the body of GET /v1/usage.
type Report struct {
	// Since is the first day reported, at 00:00 UTC.
	Since time.Time `json:"since"`
	// Usage holds one entry per template and day with seconds, by day then template.
	Usage []Entry `json:"usage"`
}

// Service answers usage queries.
type Service struct {
	store Store
	clock clock.Clock
}

// NewService returns the usage service.
func NewService(st Store, clk clock.Clock) *Service { return &Service{store: st, clock: clk} }

// ParseSince reads `since` (YYYY-MM-DD, a UTC day) at now: empty means
// DefaultDays before today; a day after today or more than MaxHistory days
// before it is a 400.
func ParseSince(since string, now time.Time) (time.Time, error) {
	today := DayStart(now)
	if since == "" {
		return today.AddDate(0, 0, -DefaultDays), nil
	}
	day, err := time.Parse(DayLayout, since)
	if err != nil {
		return time.Time{}, domain.BadRequest("since", "since must be a date, YYYY-MM-DD (a UTC day), like %s", today.Format(DayLayout))
	}
	if day.After(today) {
		return time.Time{}, domain.BadRequest("since", "since %s is in the future; today is %s (UTC)", since, today.Format(DayLayout))
	}
	if oldest := today.AddDate(0, 0, -MaxHistory); day.Before(oldest) {
		return time.Time{}, domain.BadRequest("since", "since may be at most %d days back (%s); usage is kept that long", MaxHistory, oldest.Format(DayLayout))
	}
	return day, nil
}

// Usage returns the caller's organization's usage from since (see
// ParseSince) to today. Everything read is under the caller's organization's
// partition, so no other organization's usage can appear.
//
// The ledger is read before the live environments. An environment that stops
// between the two reads is then missing from this one answer (it is in the
// next), rather than counted twice.
func (s *Service) Usage(ctx context.Context, p domain.Principal, since string) (Report, error) {
	now := s.clock.Now()
	from, err := ParseSince(since, now)
	if err != nil {
		return Report{}, err
	}
	fromDay, today := from.Format(DayLayout), DayStart(now).Format(DayLayout)
	stopped, err := s.store.ListUsage(ctx, p.OrgID, fromDay, today)
	if err != nil {
		return Report{}, err
	}
	type k struct{ day, template string }
	sums := map[k]int64{}
	for _, e := range stopped {
		sums[k{e.Day, e.Template}] += e.Seconds
	}
	q := domain.EnvQuery{State: "live", Limit: livePage}
	for {
		page, err := s.store.ListEnvironments(ctx, p.OrgID, q)
		if err != nil {
			return Report{}, err
		}
		for _, e := range page.Environments {
			for _, d := range Split(e.Created, now) {
				if d.Day >= fromDay {
					sums[k{d.Day, e.Template}] += d.Seconds
				}
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	out := Report{Since: from, Usage: make([]Entry, 0, len(sums))}
	for key, secs := range sums {
		if secs > 0 {
			out.Usage = append(out.Usage, Entry{Template: key.template, Day: key.day, Seconds: secs})
		}
	}
	sort.Slice(out.Usage, func(i, j int) bool {
		a, b := out.Usage[i], out.Usage[j]
		if a.Day != b.Day {
			return a.Day < b.Day
		}
		return a.Template < b.Template
	})
	return out, nil
}
