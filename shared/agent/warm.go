package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// warmRetry is how long a template whose warm process failed to start waits
// before the next try, so a broken command does not spin.
const warmRetry = 10 * time.Second

// warmStarts bounds the warm environments a node starts at once.
const warmStarts = 4

// warmCrowd is the window in which more than warmStarts handovers make a
// crowd: while one is being served the pool starts no replacement (each is
// a cold start's CPU, which the crowd's own handovers, ready reports and
// first commands need), and refills once the handovers have calmed. Leases
// one every 125 ms or slower are never a crowd (5 span 500 ms), and a pool
// of fewer than warmStarts+1 never sees one (it has no more to hand over);
// a faster stream drains a larger pool and refills it when the stream
// pauses. (warmSettle holds a refill briefly too.)
const warmCrowd = 500 * time.Millisecond

// warmSettle is how long after a handover of a template the pool waits
// before it refills that template, while it still holds ready processes.
// A crowd's first handovers come milliseconds apart, before warmCrowd can
// tell a crowd from them, and a replacement started then (a cold start's
// CPU, a disk made) competes with the handovers, ready reports and first
// commands the crowd needs. A template whose pool ran out refills at once.
const warmSettle = 100 * time.Millisecond

// warmPool keeps, per template of the pool with warm > 0, that many
// processes started and ready (every export accepting connections) before
// any lease asks for them. A claim of the template takes one (when the lease
// names no snapshot, whose files must be in place before the command
// starts) and is ready at once; the pool then starts a replacement.
//
// A warm process is started exactly as a claimed one would be, in its own
// folder (envs/warm-<random>), which becomes the environment's root. It
// cannot know which environment it will serve, so nothing in its
// environment names one. When the template changes, warm processes of the
// old version are stopped and replaced, never handed out.
type warmPool struct {
	a           *Agent
	mu          sync.Mutex
	ready       map[string][]warmProc
	starting    map[string]int
	failedUntil map[string]time.Time
	pokeCh      chan struct{}
	// takes are the times of the last warmStarts+1 handovers; calm pokes
	// the pool when a crowd is over.
	takes []time.Time
	// lastTake is each template's last handover (warmSettle).
	lastTake map[string]time.Time
	calm     *time.Timer
}

type warmProc struct {
	fp string
	h  runtimes.Handle
}

// alive says whether a warm environment's command still runs.
func alive(h runtimes.Handle) bool {
	select {
	case <-h.Done():
		return false
	default:
		return true
	}
}

func newWarmPool(a *Agent) *warmPool {
	return &warmPool{a: a, ready: map[string][]warmProc{}, starting: map[string]int{},
		failedUntil: map[string]time.Time{}, lastTake: map[string]time.Time{}, pokeCh: make(chan struct{}, 1)}
}

// fingerprint identifies what a process of the template is started from.
func fingerprint(t domain.Template) string {
	b, _ := json.Marshal(struct {
		Command   []string
		Env       map[string]string
		Workdir   string
		Exports   map[string]domain.Export
		Resources domain.Resources
		Runtime   string
	}{t.Command, t.Env, t.Workdir, t.Exports, t.Resources, t.Runtime})
	return string(b)
}

func (w *warmPool) poke() {
	select {
	case w.pokeCh <- struct{}{}:
	default:
	}
}

// run keeps the pool filled until ctx ends, then stops every warm process.
func (w *warmPool) run(ctx context.Context) {
	var wg sync.WaitGroup
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		w.reconcile(ctx, &wg)
		select {
		case <-ctx.Done():
			wg.Wait()
			w.mu.Lock()
			all := w.ready
			w.ready = map[string][]warmProc{}
			w.mu.Unlock()
			for _, list := range all {
				for _, x := range list {
					x.h.Stop(w.a.cfg.Grace)
					x.h.Remove()
					w.a.dropWarmLog(x.h)
				}
			}
			return
		case <-w.pokeCh:
		case <-t.C:
		}
	}
}

func (w *warmPool) reconcile(ctx context.Context, wg *sync.WaitGroup) {
	want := map[string]domain.Template{}
	if !w.a.cfg.NoWarm {
		for _, t := range w.a.templateList() {
			if t.Warm > 0 && w.a.warmable(t) {
				want[t.Name] = t
			}
		}
	}
	var drop []warmProc
	w.mu.Lock()
	for name, list := range w.ready {
		t, ok := want[name]
		// Once per template, not per process: a pool of 100 is looked
		// over at every handover.
		fp := ""
		if ok {
			fp = fingerprint(t)
		}
		keep := list[:0]
		for _, x := range list {
			if ok && x.fp == fp && alive(x.h) && len(keep) < t.Warm {
				keep = append(keep, x)
			} else {
				drop = append(drop, x)
			}
		}
		w.ready[name] = keep
	}
	now := time.Now()
	// A node short of disk starts no warm process (noRoom, asked by the
	// claims and the heartbeats, keeps short current). Nor does one whose
	// claimed environments are still starting: they come first, and the
	// last of them to be ready pokes the pool. Nor does one serving a crowd
	// of warm leases (crowdLocked). At most warmStarts start at
	// once, so a pool refilling after a crowd leaves the node room for the
	// next.
	short := w.a.short.Load() || w.a.starting.Load() > 0 || w.crowdLocked(now)
	inFlight := 0
	for _, n := range w.starting {
		inFlight += n
	}
	for name, t := range want {
		if short || now.Before(w.failedUntil[name]) {
			continue
		}
		if len(w.ready[name]) > 0 && w.settlingLocked(name, now) {
			continue // it still has some to hand out: refill once it calms
		}
		for n := len(w.ready[name]) + w.starting[name]; n < t.Warm && inFlight < warmStarts; n++ {
			inFlight++
			w.starting[name]++
			wg.Add(1)
			go func(t domain.Template) {
				defer wg.Done()
				w.start(ctx, t)
			}(t)
		}
	}
	w.mu.Unlock()
	for _, x := range drop {
		go func(x warmProc) {
			x.h.Stop(w.a.cfg.Grace)
			x.h.Remove()
			w.a.dropWarmLog(x.h)
		}(x)
	}
}

func (w *warmPool) start(ctx context.Context, t domain.Template) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	var h runtimes.Handle
	rt, err := w.a.runtimeFor(t)
	id := "warm-" + hex.EncodeToString(b[:])
	if err == nil {
		h, err = rt.Prepare(ctx, runtimes.Env{ID: id, Template: t, Org: w.a.organization(), Output: w.a.warmLog(id),
			ImageArtifact: w.a.warmImageArtifact(t)})
		w.a.warmPrepared(id, h)
	}
	started := false
	if err == nil {
		if err = h.Start(ctx); err == nil {
			started = true
			err = w.a.waitReady(ctx, h, nil)
		}
	}
	// The box it may have taken from those made ahead is made again now,
	// as after a claimed start: not while the crowd the pool waits for
	// comes.
	defer func() {
		if ctx.Err() == nil {
			w.a.prepared().Fill()
		}
	}()
	w.mu.Lock()
	w.starting[t.Name]--
	defer w.poke() // the next, within warmStarts
	if err == nil && ctx.Err() == nil {
		w.ready[t.Name] = append(w.ready[t.Name], warmProc{fp: fingerprint(t), h: h})
		w.mu.Unlock()
		w.a.log.Info("warm environment ready", append([]any{"template", t.Name, "runtime", rt.Name()}, h.LogAttrs()...)...)
		return
	}
	if ctx.Err() == nil {
		w.failedUntil[t.Name] = time.Now().Add(warmRetry)
	}
	w.mu.Unlock()
	if h != nil {
		if started {
			h.Stop(w.a.cfg.Grace)
		}
		h.Remove()
	}
	w.a.dropWarmLog(h)
	w.a.dropLog(id)
	if ctx.Err() == nil {
		w.a.log.Warn("warm environment did not become ready", "template", t.Name, "err", err)
	}
}

// crowdLocked says whether the handovers of the last warmCrowd make a
// crowd, and then arranges a poke for when they will not (or for the next
// handover to rearrange). w.mu is held.
func (w *warmPool) crowdLocked(now time.Time) bool {
	if len(w.takes) <= warmStarts || now.Sub(w.takes[0]) >= warmCrowd {
		return false
	}
	w.pokeIn(warmCrowd - now.Sub(w.takes[0]))
	return true
}

// settlingLocked says whether the template's last handover was less than
// warmSettle ago, and then arranges a poke for when it will not be. w.mu is
// held.
func (w *warmPool) settlingLocked(template string, now time.Time) bool {
	last, ok := w.lastTake[template]
	if !ok {
		return false
	}
	since := now.Sub(last)
	if since >= warmSettle {
		return false
	}
	w.pokeIn(warmSettle - since)
	return true
}

// pokeIn arranges a poke of the pool in wait (one timer, the latest ask
// wins; the pool's ticker looks again every second anyway). w.mu is held.
func (w *warmPool) pokeIn(wait time.Duration) {
	if w.calm == nil {
		w.calm = time.AfterFunc(wait, w.poke)
	} else {
		w.calm.Reset(wait)
	}
}

// take hands out a ready warm environment of exactly this template, or nil.
func (w *warmPool) take(t domain.Template) runtimes.Handle {
	fp := fingerprint(t)
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.ready[t.Name]
	for i, x := range list {
		if x.fp == fp && alive(x.h) {
			w.ready[t.Name] = append(list[:i:i], list[i+1:]...)
			now := time.Now()
			w.takes = append(w.takes, now)
			w.lastTake[t.Name] = now
			if len(w.takes) > warmStarts+1 {
				w.takes = append(w.takes[:0], w.takes[len(w.takes)-warmStarts-1:]...)
			}
			// No refill yet: the caller pokes the pool once the lease it
			// serves is reported ready, so that starting the replacement
			// (for a container: runc create, an overlay) does not compete
			// with the handover it would slow down.
			return x.h
		}
	}
	return nil
}
