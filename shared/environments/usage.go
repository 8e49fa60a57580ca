package environments

import (
	"context"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/usage"
)

// UsageStore is what leasing needs of the usage settings (store.Store).
type UsageStore interface {
	GetUsageSettings(ctx context.Context, org string) (usage.Settings, int64, error)
}

type cachedSettings struct {
	groupings []string
	fetched   time.Time
}

// usageBy returns the groupings the organization records (docs: usage and
// budgets), kept like templates for templateTTL: a lease must cost the
// authentication read plus one transaction, and a grouping enabled at most
// that long ago may miss a lease or two, which the settings' `since` says.
func (s *Service) usageBy(ctx context.Context, org string, now time.Time) ([]string, error) {
	s.mu.Lock()
	c, ok := s.settings[org]
	s.mu.Unlock()
	if ok && now.Sub(c.fetched) < s.templateTTL && !now.Before(c.fetched) {
		return c.groupings, nil
	}
	set, _, err := s.store.GetUsageSettings(ctx, org)
	if err != nil {
		return nil, err
	}
	if s.templateTTL > 0 {
		s.mu.Lock()
		s.settings[org] = cachedSettings{groupings: set.Groupings, fetched: now}
		s.mu.Unlock()
	}
	return set.Groupings, nil
}

// withUsage stamps a new environment with the groupings its stop records,
// and gives the lease the keys its transaction checks against spent budgets.
func (s *Service) withUsage(ctx context.Context, l *domain.Lease, now time.Time) error {
	by, err := s.usageBy(ctx, l.Env.OrgID, now)
	if err != nil {
		return err
	}
	if len(by) > 0 {
		l.Env.UsageBy = append([]string(nil), by...)
	}
	l.BudgetKeys = usage.LeaseBlockKeys(l.Env, now)
	return nil
}
