// Package templates serves what an organization can lease: its templates with
// the pools that run them (GET /v1/templates) and its quotas with the live
// count of each (GET /v1/quotas).
package templates

import (
	"context"
	"net/http"
	"sort"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Store is what the templates service needs from persistence.
type Store interface {
	ListTemplates(ctx context.Context, org string) ([]domain.Template, error)
	ListQuotas(ctx context.Context, org string) ([]domain.QuotaCount, error)
}

// Service holds the read rules of templates and quotas.
type Service struct {
	store Store
}

// NewService returns the templates service.
func NewService(st Store) *Service { return &Service{store: st} }

// Routes is the templates group: GET /v1/templates.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{{Method: http.MethodGet, Path: "/v1/templates", Access: httpapi.Member, Handler: s.handleTemplates}}
}

// QuotaRoutes is the quotas group: GET /v1/quotas.
func QuotaRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{{Method: http.MethodGet, Path: "/v1/quotas", Access: httpapi.Member, Handler: s.handleQuotas}}
}

// Listing is the body of GET /v1/templates.
type Listing struct {
	Templates []domain.Template `json:"templates"`
	Pools     []string          `json:"pools"`
}

// Templates returns the organization's templates, every collection non-nil
// so JSON shows [] and {} rather than null, and the sorted union of the
// pools that run them.
func (s *Service) Templates(ctx context.Context, p domain.Principal) (Listing, error) {
	ts, err := s.store.ListTemplates(ctx, p.OrgID)
	if err != nil {
		return Listing{}, err
	}
	out := Listing{Templates: make([]domain.Template, 0, len(ts)), Pools: []string{}}
	seen := map[string]bool{}
	for _, t := range ts {
		out.Templates = append(out.Templates, t.Normalized())
		for _, pool := range t.Pools {
			if !seen[pool] {
				seen[pool] = true
				out.Pools = append(out.Pools, pool)
			}
		}
	}
	sort.Strings(out.Pools)
	return out, nil
}

// Quotas returns one entry per template: its limit, its live count (read
// strongly consistent), and its default timeouts.
func (s *Service) Quotas(ctx context.Context, p domain.Principal) ([]domain.QuotaEntry, error) {
	// The quota items carry the limit, the live count and the template's
	// timeouts, written together by PutTemplate: one query answers.
	counts, err := s.store.ListQuotas(ctx, p.OrgID)
	if err != nil {
		return nil, err
	}
	out := make([]domain.QuotaEntry, 0, len(counts))
	for _, c := range counts {
		q := domain.QuotaEntry{
			Template: c.Template, MaxLeases: c.MaxLeases, Running: c.Running, Idle: c.Idle, Hard: c.Hard,
		}
		if c.MaxPaused > 0 || c.Paused > 0 {
			paused := c.Paused
			q.MaxPaused, q.Paused = c.MaxPaused, &paused
		}
		out = append(out, q)
	}
	return out, nil
}

func (s *Service) handleTemplates(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	out, err := s.Templates(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Service) handleQuotas(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	qs, err := s.Quotas(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"quotas": qs})
	return nil
}
