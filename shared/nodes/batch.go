package nodes

import (
	"context"
	"encoding/json"
	"errors"
	mrand "math/rand/v2"
	"sync"

	"github.com/envlease/envlease/shared/domain"
)

// A claim of many environments at once (Message.Max > 0): a node offered a
// crowd takes as many as its free capacity allows in one message, instead
// of one round trip per environment. docs/nodes.md, "Claiming a crowd",
// and docs/scale.md give the costs.
const (
	// MaxClaimBatch bounds the environments one claim message takes (and
	// so one transaction: the store takes up to 48).
	MaxClaimBatch = 32
	// claimAnswerBudget bounds the bytes of a batch claim's answer, below
	// API Gateway's 128 KB per posted message: a wave takes only the
	// environments whose claims fit in what is left of it (fits).
	claimAnswerBudget = 96 << 10
	// claimOverhead and claimLinkBytes are what a claim carries beside its
	// environment and template: the answer's own fields, and a signed
	// link with its artifact's details.
	claimOverhead  = 256
	claimLinkBytes = 2 << 10
)

// ClaimBatch claims up to want environments for a node on the node
// protocol: the offered ones first (those still pending in the node's pool
// that it can run), then, unless only, the oldest few pending in random
// order. They are claimed together, in one conditional transaction
// (store.ClaimEnvironments: each environment's put conditioned on its
// version and pending, the node's claim fence, the credential unrevoked),
// so no environment is claimed twice and claims of one node racing each
// other never take more than its free capacity together; want is cut to
// that capacity, read with the node. A batch costs
// one transaction and four calls beside it, whatever its size: the node,
// its environments, one batch read of the offered ones, one read per
// distinct template; one pending query per class when the offered ones did
// not fill it (TestBatchClaimCalls). An error with claims cut the batch
// short: the claims stand, and the node must hear of them; the rest stays
// pending.
func (s *Service) ClaimBatch(ctx context.Context, p domain.Principal, id string, offered []string, want int, only bool) ([]Claimed, error) {
	return s.claimBatch(ctx, p, id, offered, want, only)
}

func (s *Service) claimBatch(ctx context.Context, p domain.Principal, id string, offered []string, want int, only bool) ([]Claimed, error) {
	var ids []string
	seen := map[string]bool{}
	for _, x := range offered {
		if validEnvID(x) && !seen[x] && len(ids) < MaxClaimBatch {
			seen[x] = true
			ids = append(ids, x)
		}
	}
	n, envs, err := s.claimReads(ctx, p, id, ids, min(want, MaxClaimBatch))
	if err != nil {
		return nil, err
	}
	want = min(want, MaxClaimBatch, n.Capacity-len(n.Claims.Held))
	b := &batch{s: s, n: n, keyHash: p.KeyHash, templates: map[string]*templateRead{}, seen: seen}

	if len(ids) > 0 {
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

// claimReads reads what a batch claim needs before it can claim, at once
// rather than one after another (each is a round trip to DynamoDB): the
// node with its credential, the ids its index lists, and the offered
// environments (ids). The node comes back with Claims.Held as what it may
// hold: when what its index and its claim fence name leaves room for want
// more, that count is used as it is, an upper bound of what the node
// holds, and nothing more is read (domain.Node.MayHold); otherwise each of those
// is read (NodeHoldingListed), so a node near its capacity is judged
// exactly. Either way the claim fence then keeps racing claims of the node
// within its capacity. A node with no room is refused (409).
func (s *Service) claimReads(ctx context.Context, p domain.Principal, id string, ids []string, want int) (domain.Node, []domain.Environment, error) {
	var (
		wg         sync.WaitGroup
		listed     []string
		envs       []domain.Environment
		lerr, eerr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if validNodeID(id) {
			listed, lerr = s.store.NodeListed(ctx, p.OrgID, id)
		}
	}()
	if len(ids) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			envs, eerr = s.store.GetEnvironments(ctx, p.OrgID, ids)
		}()
	}
	n, err := s.activeNode(ctx, p, id)
	wg.Wait()
	switch {
	case err != nil:
		return domain.Node{}, nil, err
	case lerr != nil:
		return domain.Node{}, nil, lerr
	case eerr != nil:
		return domain.Node{}, nil, eerr
	}
	if may := n.MayHold(listed); len(may)+max(want, 1) <= n.Capacity {
		n.Claims.Held = may
		return n, envs, nil
	}
	runs, n, err := s.store.NodeHoldingListed(ctx, n, listed)
	if err != nil {
		return domain.Node{}, nil, err
	}
	if len(runs) >= n.Capacity {
		return domain.Node{}, nil, atCapacity(n)
	}
	return n, envs, nil
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

// claim claims from cands, in order, until the batch holds limit, the node
// has no room or the answer has none: in waves, each wave's environments in
// one transaction (ClaimEnvironments), under the node's claim fence, so a
// wave never takes more than the room the node has (another claim of the
// node that came first makes the wave read the node again). Those
// a wave was refused are read again and, still pending, tried once more
// (another node may have them, or a touch changed their version).
func (b *batch) claim(ctx context.Context, cands []domain.Environment, limit int) error {
	retried := map[string]bool{}
	raced := 0
	for len(cands) > 0 && len(b.out) < limit && !b.full {
		room := b.n.Capacity - len(b.n.Claims.Held)
		if room <= 0 {
			return nil
		}
		wave := b.fits(ctx, cands[:min(len(cands), limit-len(b.out), room)])
		if wave == 0 {
			if len(b.out) > 0 {
				b.full = true
				return nil
			}
			wave = 1 // one claim always fits the protocol's own limit
		}
		claimed, refused, err := b.s.store.ClaimEnvironments(ctx, cands[:wave], b.n, b.keyHash, b.s.clock.Now())
		if errors.Is(err, domain.ErrClaimRaced) && raced < attempts {
			// Another claim of this node came first: read what it holds
			// now and go on with the room left.
			raced++
			n, err := b.s.roomOf(ctx, b.n)
			if err != nil {
				if len(b.out) > 0 && domain.ErrorCode(err) == domain.CodeConflict {
					return nil
				}
				return err
			}
			b.n = n
			continue
		}
		cands = cands[wave:]
		if err != nil {
			return err
		}
		claimedIDs := make([]string, len(claimed))
		for i, e := range claimed {
			claimedIDs[i] = e.ID
		}
		b.n = holds(b.n, claimedIDs...)
		if err := b.prepare(ctx, claimed); err != nil {
			return err
		}
		var again []string
		for _, id := range refused {
			if !retried[id] {
				retried[id] = true
				again = append(again, id)
			}
		}
		if len(again) > 0 {
			envs, err := b.s.store.GetEnvironments(ctx, b.n.OrgID, again)
			if err != nil {
				return err
			}
			var still []domain.Environment
			for _, e := range envs {
				if e.State == domain.StatePending && e.Node == "" && e.Pool == b.n.Pool && b.n.Runs(e.Needs) {
					still = append(still, e)
				}
			}
			cands = append(still, cands...)
		}
	}
	return nil
}

// fits says how many of cands, in order, the answer still has room for,
// from what each claim will carry: its environment, its template (read
// now, once a batch, as prepare would) and a link per artifact.
func (b *batch) fits(ctx context.Context, cands []domain.Environment) int {
	used := b.bytes
	for i, e := range cands {
		size := claimOverhead
		if raw, err := json.Marshal(e); err == nil {
			size += len(raw)
		}
		links := len(e.Shares)
		if e.Snapshot != "" {
			links++
		}
		if t, err := b.template(ctx, e.OrgID, e.Template); err == nil {
			if raw, err := json.Marshal(t); err == nil {
				size += len(raw)
			}
			if t.Image != nil && t.Image.Artifact != "" {
				links++
			}
		}
		size += claimLinkBytes * links
		if used+size > claimAnswerBudget {
			return i
		}
		used += size
	}
	return len(cands)
}

// prepare gathers what the node needs for each environment claimed (the
// template, read once a batch; links to its artifacts), at once. One that
// can no longer run is failed (prepare) and left out.
func (b *batch) prepare(ctx context.Context, claimed []domain.Environment) error {
	var wg sync.WaitGroup
	errs := make([]error, len(claimed))
	for i, e := range claimed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := b.s.prepare(ctx, e, b.template)
			if err != nil || c == nil {
				errs[i] = err
				return
			}
			raw, _ := json.Marshal(c)
			b.mu.Lock()
			b.out = append(b.out, *c)
			b.bytes += len(raw)
			b.mu.Unlock()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
