package nodes

import (
	"context"
	"encoding/json"
	mrand "math/rand/v2"
	"sync"

	"github.com/envlease/envlease/shared/domain"
)

// A claim of many environments at once (Message.Max > 0): a node offered a
// crowd takes as many as its free capacity allows in one message, instead
// of one round trip per environment. docs/nodes.md, "Claiming a crowd",
// and docs/scale.md give the costs.
const (
	// MaxClaimBatch bounds the environments one claim message takes.
	MaxClaimBatch = 32
	// claimAnswerBudget bounds the bytes of a batch claim's answer, below
	// API Gateway's 128 KB per posted message: claims are made in waves
	// sized from the largest claim seen so far, and no wave is started
	// that could take the answer past it.
	claimAnswerBudget = 96 << 10
	// claimSizeGuess is the size assumed for a claim before one is seen.
	claimSizeGuess = 8 << 10
)

// ClaimBatch claims up to max environments for a node on the node
// protocol: the offered ones first (those still pending in the node's pool
// that it can run), then, unless only, the oldest few pending in random
// order. Each environment is claimed by its own conditional transaction
// (ClaimEnvironment), as a single claim is, so no environment is claimed
// twice; max is cut to the node's free capacity, read once. What it costs
// in DynamoDB calls beside one transaction per environment does not grow
// with the batch: the node, its environments, one batch read of the
// offered ones, one read per distinct template, and one pending query per
// class when the offered ones did not fill it (TestBatchClaimCalls). An
// error with claims cut the batch short: the claims stand, and the node
// must hear of them; the rest stays pending.
func (s *Service) ClaimBatch(ctx context.Context, p domain.Principal, id string, offered []string, want int, only bool) ([]Claimed, error) {
	return s.claimBatch(ctx, p, id, offered, want, only)
}

func (s *Service) claimBatch(ctx context.Context, p domain.Principal, id string, offered []string, want int, only bool) ([]Claimed, error) {
	n, err := s.activeNode(ctx, p, id)
	if err != nil {
		return nil, err
	}
	runs, err := s.store.NodeEnvironments(ctx, n.OrgID, n.ID)
	if err != nil {
		return nil, err
	}
	if len(runs) >= n.Capacity {
		return nil, domain.Errorf(domain.CodeConflict, "node %s is at its capacity of %d environment(s); claim again when one has stopped", n.ID, n.Capacity)
	}
	want = min(want, MaxClaimBatch, n.Capacity-len(runs))
	b := &batch{s: s, n: n, keyHash: p.KeyHash, templates: map[string]*templateRead{}, seen: map[string]bool{}}

	var ids []string
	for _, x := range offered {
		if validEnvID(x) && !b.seen[x] && len(ids) < MaxClaimBatch {
			b.seen[x] = true
			ids = append(ids, x)
		}
	}
	if len(ids) > 0 {
		envs, err := s.store.GetEnvironments(ctx, n.OrgID, ids)
		if err != nil {
			return nil, err
		}
		var cands []domain.Environment
		for _, e := range envs {
			if e.State == domain.StatePending && e.Node == "" && e.Pool == n.Pool && n.Runs(e.Needs) {
				cands = append(cands, e)
			}
		}
		if err := b.claim(ctx, cands, want); err != nil {
			return b.out, err
		}
	}
	if only || len(b.out) >= want || b.full {
		return b.out, nil
	}
	cands, err := s.pending(ctx, n, want-len(b.out)+claimCandidates)
	if err != nil {
		return b.out, err
	}
	mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	cands = unseen(cands, b.seen)
	return b.out, b.claim(ctx, cands, want)
}

// unseen keeps the candidates not yet tried in this batch.
func unseen(cands []domain.Environment, seen map[string]bool) []domain.Environment {
	out := cands[:0]
	for _, e := range cands {
		if !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e)
		}
	}
	return out
}

// batch is one batch claim in progress.
type batch struct {
	s       *Service
	n       domain.Node
	keyHash string
	seen    map[string]bool

	mu        sync.Mutex
	out       []Claimed
	bytes     int
	largest   int
	templates map[string]*templateRead
	// full: the answer has no room for another claim.
	full bool
}

// templateRead is one template read once for the whole batch.
type templateRead struct {
	once sync.Once
	t    domain.Template
	err  error
}

func (b *batch) template(ctx context.Context, org, name string) (domain.Template, error) {
	b.mu.Lock()
	r := b.templates[org+"/"+name]
	if r == nil {
		r = &templateRead{}
		b.templates[org+"/"+name] = r
	}
	b.mu.Unlock()
	r.once.Do(func() { r.t, r.err = b.s.store.GetTemplate(ctx, org, name) })
	return r.t, r.err
}

// claim claims from cands, in order, until the batch holds max or the
// answer has no room (limit), in waves whose claims run at once.
func (b *batch) claim(ctx context.Context, cands []domain.Environment, limit int) error {
	for len(cands) > 0 && len(b.out) < limit && !b.full {
		size := b.largest
		if size == 0 {
			size = claimSizeGuess
		}
		wave := min(len(cands), limit-len(b.out), (claimAnswerBudget-b.bytes)/size)
		if wave <= 0 {
			if len(b.out) > 0 {
				b.full = true
				return nil
			}
			wave = 1 // one claim always fits the protocol's own limit
		}
		var wg sync.WaitGroup
		errs := make([]error, wave)
		for i, e := range cands[:wave] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := b.s.claimFirstWith(ctx, b.keyHash, b.n, []domain.Environment{e}, b.template)
				if err != nil || c == nil {
					errs[i] = err
					return
				}
				raw, _ := json.Marshal(c)
				b.mu.Lock()
				b.out = append(b.out, *c)
				b.bytes += len(raw)
				b.largest = max(b.largest, len(raw))
				b.mu.Unlock()
			}()
		}
		wg.Wait()
		cands = cands[wave:]
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	return nil
}
