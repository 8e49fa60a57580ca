package nodes

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// DefaultClassesTTL is how long a warm function reuses the pool's template
// classes it read to claim: a template applied with a new runtime or new
// platforms is claimed from within that long.
const DefaultClassesTTL = 30 * time.Second

// classCache keeps, per organization and pool, the needs of the pool's
// templates, so a claim's look costs the pending queries alone.
type classCache struct {
	mu sync.Mutex
	m  map[string]cachedNeeds
}

type cachedNeeds struct {
	needs   []domain.Needs
	fetched time.Time
}

// validateCapabilities checks what a registering node says it offers and
// fills in the defaults: process when it names no runtime.
func validateCapabilities(req *RegisterRequest) error {
	if req.Platform != "" {
		if err := domain.ValidatePlatform("platform", req.Platform); err != nil {
			return err
		}
	}
	if len(req.Runtimes) == 0 {
		req.Runtimes = []string{domain.RuntimeProcess}
	}
	for i, rt := range req.Runtimes {
		field := fmt.Sprintf("runtimes[%d]", i)
		if !slices.Contains(domain.Runtimes, rt) {
			return domain.Invalid(field, "runtime %q is not one of: %s", rt, strings.Join(domain.Runtimes, ", "))
		}
		if slices.Contains(req.Runtimes[:i], rt) {
			return domain.Invalid(field, "runtime %q is given twice", rt)
		}
	}
	return nil
}

// poolNeeds are the distinct needs of the templates the node's pool runs,
// read at most every DefaultClassesTTL by a warm function.
func (s *Service) poolNeeds(ctx context.Context, n domain.Node) ([]domain.Needs, error) {
	k := n.OrgID + "#" + n.Pool
	s.classes.mu.Lock()
	c, ok := s.classes.m[k]
	s.classes.mu.Unlock()
	if ok && time.Since(c.fetched) < s.opt.ClassesTTL {
		return c.needs, nil
	}
	ts, err := s.store.ListTemplates(ctx, n.OrgID)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []domain.Needs
	for _, t := range ts {
		nd := domain.NeedsOf(t)
		if slices.Contains(t.Pools, n.Pool) && !seen[nd.Class()] {
			seen[nd.Class()] = true
			out = append(out, nd)
		}
	}
	s.classes.mu.Lock()
	if s.classes.m == nil {
		s.classes.m = map[string]cachedNeeds{}
	}
	s.classes.m[k] = cachedNeeds{needs: out, fetched: time.Now()}
	s.classes.mu.Unlock()
	return out, nil
}

// pending returns up to limit of the oldest pending environments of the
// node's pool that it can run: one query per class of work it can run that
// the pool's templates ask for (one, for a pool of process templates), so an
// environment no node of the pool can run never hides one that this node
// can. The default class (a process on any platform) is always looked at by
// a node that offers process, whatever the templates say now.
func (s *Service) pending(ctx context.Context, n domain.Node, limit int) ([]domain.Environment, error) {
	needs, err := s.poolNeeds(ctx, n)
	if err != nil {
		return nil, err
	}
	classes := []string{}
	if n.Runs(domain.Needs{}) {
		classes = append(classes, "")
	}
	for _, nd := range needs {
		if c := nd.Class(); n.Runs(nd) && !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	var out []domain.Environment
	for _, c := range classes {
		envs, err := s.store.PendingEnvironments(ctx, n.OrgID, n.Pool, c, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, envs...)
	}
	if len(classes) > 1 {
		sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
		if len(out) > limit {
			out = out[:limit]
		}
	}
	return out, nil
}

// cannotRun is the refusal of a claim of an environment the node cannot run.
func cannotRun(n domain.Node, e domain.Environment) error {
	return domain.Errorf(domain.CodeConflict, "node %s cannot run environment %s: its template %q needs %s, and the node offers %s",
		n.ID, e.ID, e.Template, e.Needs, n.Offers())
}
