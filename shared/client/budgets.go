package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/usage"
)

// UsageQuery selects a usage report: days Since..Until (zero: the service's
// defaults, 30 days back to today), grouped By template (empty), project,
// user or label:KEY, kept to Filter (DIM=VALUE).
type UsageQuery struct {
	Since, Until time.Time
	By, Filter   string
}

// UsageBy reads a usage report grouped and filtered.
func (c *Client) UsageBy(ctx context.Context, q UsageQuery) (UsageReport, error) {
	v := url.Values{}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.DateOnly))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.DateOnly))
	}
	if q.By != "" {
		v.Set("by", q.By)
	}
	if q.Filter != "" {
		v.Set("filter", q.Filter)
	}
	var out UsageReport
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/usage", query: v, retry: true}, &out)
	return out, err
}

// UsageSettings reads the organization's usage settings.
func (c *Client) UsageSettings(ctx context.Context) (usage.Settings, error) {
	var out struct {
		Settings usage.Settings `json:"settings"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/usage/settings", retry: true}, &out)
	return out.Settings, err
}

// PutUsageSettings replaces the organization's usage settings (admins).
func (c *Client) PutUsageSettings(ctx context.Context, s usage.Settings) (usage.Settings, error) {
	s.Since = nil
	var out struct {
		Settings usage.Settings `json:"settings"`
	}
	_, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/usage/settings", body: s, retry: true}, &out)
	return out.Settings, err
}

// BudgetList is the organization's budgets with what is left of them.
type BudgetList struct {
	Budgets  []usage.Status `json:"budgets"`
	Currency string         `json:"currency,omitempty"`
}

// Budgets lists the organization's budgets.
func (c *Client) Budgets(ctx context.Context) (BudgetList, error) {
	var out BudgetList
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/budgets", retry: true}, &out)
	return out, err
}

// PutBudget sets budget b (admins). A PUT replaces, so it is retried.
func (c *Client) PutBudget(ctx context.Context, b usage.Budget) (usage.Status, error) {
	var out struct {
		Budget usage.Status `json:"budget"`
	}
	body := map[string]any{"scope": b.Scope, "period": b.Period, "hard": b.Hard}
	if b.Seconds > 0 {
		body["seconds"] = b.Seconds
	}
	if b.Cost > 0 {
		body["cost"] = b.Cost
	}
	_, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/budgets/" + seg(b.ID), body: body, retry: true}, &out)
	return out.Budget, err
}

// DeleteBudget removes a budget (admins).
func (c *Client) DeleteBudget(ctx context.Context, id string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/budgets/" + seg(id), retry: true}, nil)
	return err
}
