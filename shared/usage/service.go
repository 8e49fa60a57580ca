// Package usage reports environment time: seconds per template per UTC day
// (GET /v1/usage, spec 2.6). Stopped environments are read from the ledger
// the stop transaction writes (store: ORG#<org> USAGE#<day>#<template>);
// live environments are added up to now, so the report never waits for a stop.
package usage

import (
	"context"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// Store is what the service needs from persistence (store.Store).
type Store interface {
	ListUsage(ctx context.Context, org, from, to string) ([]Entry, error)
	ListUsageBy(ctx context.Context, org, dim, from, to string) ([]GroupEntry, error)
	GetUsageSettings(ctx context.Context, org string) (Settings, int64, error)
	PutUsageSettings(ctx context.Context, org string, set Settings, version int64) error
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

// Report is the body of GET /v1/usage. Without by, filter and until it is
// the specification's answer (since, usage), with cost and currency added
// when the organization set rates.
type Report struct {
	// Since is the first day reported, at 00:00 UTC.
	Since time.Time `json:"since"`
	// Until is the last day reported, when the query named one or grouped.
	Until string `json:"until,omitempty"`
	// By is the grouping of the entries when the query asked for one.
	By string `json:"by,omitempty"`
	// Filter is the filter applied, DIM=VALUE.
	Filter string `json:"filter,omitempty"`
	// GroupedSince is the first day the grouping was recorded; usage before
	// it is not in a grouped answer.
	GroupedSince string `json:"groupedSince,omitempty"`
	// Currency of the costs, when the organization set rates.
	Currency string `json:"currency,omitempty"`
	// Usage holds one entry per group and day with seconds, by day then group.
	Usage []Entry `json:"usage"`
	// Paused is what paused environments hold now, per template: they
	// accrue no seconds, and their checkpoints' stored bytes are reported
	// here (docs/usage.md, "Paused environments"); absent when none is.
	Paused []PausedEntry `json:"paused,omitempty"`
}

// PausedEntry is one template's paused environments and the bytes their
// checkpoints store (the compressed archives).
type PausedEntry struct {
	Template     string `json:"template"`
	Environments int    `json:"environments"`
	Bytes        int64  `json:"bytes"`
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
// ParseSince) to today, by template: the specification's answer.
func (s *Service) Usage(ctx context.Context, p domain.Principal, since string) (Report, error) {
	return s.Query(ctx, p, Query{Since: since})
}
