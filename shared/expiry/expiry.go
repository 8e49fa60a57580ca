// Package expiry is the artifact expiry job: it deletes the S3 objects and
// unfinished multipart uploads of due artifacts and turns their records into
// tombstones (state expired, ttl = now + store.ArtifactTombstone), which
// answer 410 until DynamoDB TTL removes them. Due (domain.Artifact.DueAt) is
// a sealed artifact past its expiry, and an open or failed one whose upload
// requests stopped working (plus domain.ArtifactUploadGrace): an abandoned
// upload, or bytes sent again through the request of a failed one, would
// otherwise stay until the bucket's lifecycle rule. It runs on a schedule
// (functions/expiry in AWS, the devserver locally) and is a plain function of
// a context, a store, object storage and a clock.
package expiry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/sweep"
)

// Store is what the job needs from persistence (store.Store).
type Store interface {
	ArtifactDuePartitions() []string
	DueArtifacts(ctx context.Context, part string, now time.Time, limit int, cursor string) ([]domain.Artifact, string, error)
	GetArtifact(ctx context.Context, org, id string) (domain.Artifact, error)
	AbandonArtifact(ctx context.Context, org, id string, uploadUntil time.Time) error
	ExpireArtifact(ctx context.Context, org, id string, now time.Time) error
}

// Blobs is what the job needs from object storage (blob.Store).
type Blobs interface {
	DeletePrefix(ctx context.Context, prefix string) (int, error)
	AbortUploads(ctx context.Context, prefix string) (int, error)
}

// Defaults of Options.
const (
	DefaultPageSize     = 100
	DefaultWorkers      = 4
	DefaultShardWorkers = 8
)

// Options tune a run; zero values take the defaults.
type Options struct {
	PageSize int
	// Workers is how many artifacts of a page are expired at once, and
	// ShardWorkers how many due-index partitions are worked at once.
	Workers      int
	ShardWorkers int
	// MaxPages bounds the index pages of one run over all partitions (0:
	// until nothing is due).
	MaxPages int
	// Margin is how long before the context's deadline the run stops taking
	// new work (sweep.DefaultMargin if 0); BudgetClock measures it (real
	// time if nil).
	Margin      time.Duration
	BudgetClock clock.Clock
	// Log receives a warning per artifact whose multipart leftovers could not
	// be listed or aborted (nil: discarded).
	Log *slog.Logger
}

// Summary is what a run did; the scheduled function logs it as JSON.
type Summary struct {
	// Found is how many due candidates the index returned.
	Found int `json:"found"`
	// Expired is how many this run turned into tombstones. Two overlapping
	// runs that reach one artifact at the same moment may both count it:
	// store.ExpireArtifact conditions its write on the state it read, which
	// a tombstone written just before also satisfies; the result is the same
	// tombstone.
	Expired int `json:"expired"`
	// Unsealed is how many of Expired were never sealed: open (abandoned
	// uploads) or failed.
	Unsealed int `json:"unsealed"`
	// AlreadyExpired were tombstones already (an overlapping run got there first).
	AlreadyExpired int `json:"alreadyExpired"`
	// NotDue were in the index but not due on the base item: renewed or
	// sealed since the index copy was written. They are left alone.
	NotDue int `json:"notDue"`
	// Objects and Uploads count the S3 objects deleted and uploads aborted.
	Objects int `json:"objects"`
	Uploads int `json:"uploads"`
	// UploadCleanupFailed counts sealed artifacts whose multipart leftovers
	// could not be aborted; they are tombstoned anyway (the bucket's
	// lifecycle rule aborts leftovers after a day). An open or failed
	// artifact whose upload could not be aborted counts as Failed instead:
	// the upload is what its cleanup is for.
	UploadCleanupFailed int `json:"uploadCleanupFailed"`
	// Failed could not be expired; they stay in the index and the next run retries.
	Failed     int   `json:"failed"`
	Partitions int   `json:"partitions"`
	Pages      int   `json:"pages"`
	More       bool  `json:"more"`
	DurationMs int64 `json:"durationMs"`
}

// Run expires every artifact due at the clock's current instant, working the
// partitions of the due index with up to ShardWorkers at once, each in pages
// with continuation, until the time budget (the context's deadline less
// Margin) or MaxPages ends it (More).
//
// Per artifact, the objects go first and the tombstone after, so a
// tombstone always means the bytes are gone; a run that dies in between
// leaves the artifact in the index, and the next run finishes it. An open
// artifact is failed first (store.AbandonArtifact, conditioned on the upload
// window read), so no complete can seal it and no renewal reopen it while its
// bytes go. Every step is idempotent (deleting a missing object succeeds; the
// state writes are conditioned on what was read), so runs may overlap.
func Run(ctx context.Context, st Store, blobs Blobs, clk clock.Clock, opts Options) (Summary, error) {
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.ShardWorkers <= 0 {
		opts.ShardWorkers = DefaultShardWorkers
	}
	start := time.Now()
	now := clk.Now()
	budget := sweep.NewBudget(ctx, opts.BudgetClock, opts.Margin)
	var (
		mu    sync.Mutex
		sum   Summary
		errs  []error
		pages int
	)
	takePage := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if budget.Spent() || opts.MaxPages > 0 && pages >= opts.MaxPages {
			sum.More = true
			return false
		}
		pages++
		return true
	}
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	sweep.Each(ctx, st.ArtifactDuePartitions(), opts.ShardWorkers, func(ctx context.Context, part string) {
		for cursor, read := "", false; ; {
			if err := ctx.Err(); err != nil {
				fail(err)
				return
			}
			if !takePage() {
				return
			}
			due, next, err := st.DueArtifacts(ctx, part, now, opts.PageSize, cursor)
			mu.Lock()
			if !read {
				read = true
				sum.Partitions++
			}
			sum.Pages++
			if err == nil {
				sum.Found += len(due)
			}
			mu.Unlock()
			if err != nil {
				fail(fmt.Errorf("read due partition %s: %w", part, err))
				return
			}
			if err := expireAll(ctx, st, blobs, due, now, opts, budget, &mu, &sum); err != nil {
				fail(err)
			}
			if next == "" {
				return
			}
			cursor = next
		}
	})
	sum.DurationMs = time.Since(start).Milliseconds()
	return sum, errors.Join(errs...)
}

func expireAll(ctx context.Context, st Store, blobs Blobs, due []domain.Artifact, now time.Time, opts Options, budget sweep.Budget, mu *sync.Mutex, sum *Summary) error {
	var first error
	left := sweep.Work(due, opts.Workers, budget, func(a domain.Artifact) {
		r, err := expireOne(ctx, st, blobs, a, now, opts.Log)
		mu.Lock()
		defer mu.Unlock()
		sum.Objects += r.objects
		sum.Uploads += r.uploads
		switch {
		case err != nil:
			sum.Failed++
			if first == nil {
				first = fmt.Errorf("expire %s/%s: %w", a.OrgID, a.ID, err)
			}
		case r.already:
			sum.AlreadyExpired++
		case r.notDue:
			sum.NotDue++
		default:
			sum.Expired++
			if r.unsealed {
				sum.Unsealed++
			}
		}
		if r.uploadsFailed {
			sum.UploadCleanupFailed++
		}
	})
	if left {
		mu.Lock()
		sum.More = true
		mu.Unlock()
	}
	return first
}

type result struct {
	objects, uploads int
	already          bool
	notDue           bool
	unsealed         bool
	uploadsFailed    bool
}

// expireOne expires one artifact found in the index. It re-reads the base
// item first: the index may lag, an artifact already tombstoned by an
// overlapping run needs no second S3 pass, and an upload renewed or sealed
// since is not due any more.
func expireOne(ctx context.Context, st Store, blobs Blobs, a domain.Artifact, now time.Time, log *slog.Logger) (result, error) {
	var r result
	var cur domain.Artifact
	// Twice at most: a refused AbandonArtifact means the record changed, and
	// what it became is decided once more.
	for attempt := 0; ; attempt++ {
		var err error
		cur, err = st.GetArtifact(ctx, a.OrgID, a.ID)
		if domain.ErrorCode(err) == domain.CodeNotFound {
			r.already = true // TTL removed it: nothing left to do
			return r, nil
		}
		if err != nil {
			return r, err
		}
		due, ok := cur.DueAt()
		if !ok {
			r.already = true
			return r, nil
		}
		if now.Before(due) {
			r.notDue = true
			return r, nil
		}
		if cur.State != domain.ArtifactOpen {
			break
		}
		err = st.AbandonArtifact(ctx, cur.OrgID, cur.ID, cur.UploadUntil)
		if err == nil {
			cur.State = domain.ArtifactFailed
			break
		}
		if domain.ErrorCode(err) != domain.CodeConflict || attempt == 1 {
			return r, err
		}
	}
	r.unsealed = cur.State != domain.ArtifactSealed
	prefix := blob.Prefix(cur.OrgID, cur.ID)
	// Uploads before objects: a multipart upload completed while the abort
	// runs becomes an object that the deletion after it still finds.
	var abortErr error
	r.uploads, abortErr = blobs.AbortUploads(ctx, prefix)
	var err error
	if r.objects, err = blobs.DeletePrefix(ctx, prefix); err != nil {
		return r, errors.Join(err, abortErr)
	}
	if abortErr != nil {
		if r.unsealed {
			// The upload is what this cleanup is for: no tombstone yet; the
			// artifact stays failed and due, and the next run tries again.
			return r, abortErr
		}
		// The objects are gone, which is what expiry promises; leftovers of
		// an upload are not readable and the lifecycle rule removes them.
		r.uploadsFailed = true
		log.WarnContext(ctx, "expiry: multipart leftovers not aborted", "org", cur.OrgID, "artifact", cur.ID, "err", abortErr)
	}
	err = st.ExpireArtifact(ctx, cur.OrgID, cur.ID, now)
	if domain.ErrorCode(err) == domain.CodeConflict {
		// The state changed between ExpireArtifact's read and write: only an
		// overlapping run tombstoning it can do that (a failed artifact
		// changes no more, and a sealed one only into a tombstone).
		r.already = true
		return r, nil
	}
	return r, err
}
