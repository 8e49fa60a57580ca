// Package expiry is the artifact expiry job: it deletes the S3 objects of
// sealed artifacts whose expiry has passed and turns their records into
// tombstones (state expired, ttl = now + store.ArtifactTombstone), which
// answer 410 until DynamoDB TTL removes them. It runs on a schedule
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
)

// Store is what the job needs from persistence (store.Store).
type Store interface {
	DueArtifacts(ctx context.Context, now time.Time, limit int, cursor string) ([]domain.Artifact, string, error)
	GetArtifact(ctx context.Context, org, id string) (domain.Artifact, error)
	ExpireArtifact(ctx context.Context, org, id string, now time.Time) error
}

// Blobs is what the job needs from object storage (blob.Store).
type Blobs interface {
	DeletePrefix(ctx context.Context, prefix string) (int, error)
	AbortUploads(ctx context.Context, prefix string) (int, error)
}

// Defaults of Options.
const (
	DefaultPageSize = 100
	DefaultWorkers  = 8
)

// Options tune a run; zero values take the defaults.
type Options struct {
	PageSize int
	Workers  int
	// MaxPages bounds one run (0: until nothing is due).
	MaxPages int
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
	// AlreadyExpired were tombstones already (an overlapping run got there first).
	AlreadyExpired int `json:"alreadyExpired"`
	// Objects and Uploads count the S3 objects deleted and uploads aborted.
	Objects int `json:"objects"`
	Uploads int `json:"uploads"`
	// UploadCleanupFailed counts artifacts whose multipart leftovers could
	// not be aborted; they are tombstoned anyway (the bucket's lifecycle rule
	// aborts leftovers after a day).
	UploadCleanupFailed int `json:"uploadCleanupFailed"`
	// Failed could not be expired; they stay in the index and the next run retries.
	Failed     int   `json:"failed"`
	Pages      int   `json:"pages"`
	More       bool  `json:"more"`
	DurationMs int64 `json:"durationMs"`
}

// Run expires every sealed artifact due at the clock's current instant,
// walking the due index in pages with continuation.
//
// Per artifact, the objects go first and the tombstone after, so a
// tombstone always means the bytes are gone; a run that dies in between
// leaves the artifact sealed and in the index, and the next run finishes it.
// Every step is idempotent (deleting a missing object succeeds; the
// tombstone write is conditioned on the state read), so runs may overlap.
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
	start := time.Now()
	now := clk.Now()
	var sum Summary
	var errs []error
	cursor := ""
	for {
		if opts.MaxPages > 0 && sum.Pages == opts.MaxPages {
			sum.More = true
			break
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		due, next, err := st.DueArtifacts(ctx, now, opts.PageSize, cursor)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the due index: %w", err))
			break
		}
		sum.Pages++
		sum.Found += len(due)
		if err := expireAll(ctx, st, blobs, due, now, opts, &sum); err != nil {
			errs = append(errs, err)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	sum.DurationMs = time.Since(start).Milliseconds()
	return sum, errors.Join(errs...)
}

func expireAll(ctx context.Context, st Store, blobs Blobs, due []domain.Artifact, now time.Time, opts Options, sum *Summary) error {
	var mu sync.Mutex
	var first error
	jobs := make(chan domain.Artifact)
	var wg sync.WaitGroup
	for range min(opts.Workers, len(due)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range jobs {
				r, err := expireOne(ctx, st, blobs, a, now, opts.Log)
				mu.Lock()
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
				default:
					sum.Expired++
				}
				if r.uploadsFailed {
					sum.UploadCleanupFailed++
				}
				mu.Unlock()
			}
		}()
	}
	for _, a := range due {
		jobs <- a
	}
	close(jobs)
	wg.Wait()
	return first
}

type result struct {
	objects, uploads int
	already          bool
	uploadsFailed    bool
}

// expireOne expires one artifact found in the index. It re-reads the base
// item first: the index may lag, and an artifact already tombstoned by an
// overlapping run needs no second S3 pass.
func expireOne(ctx context.Context, st Store, blobs Blobs, a domain.Artifact, now time.Time, log *slog.Logger) (result, error) {
	var r result
	cur, err := st.GetArtifact(ctx, a.OrgID, a.ID)
	if domain.ErrorCode(err) == domain.CodeNotFound {
		r.already = true // TTL removed it: nothing left to do
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if cur.State == domain.ArtifactExpired {
		r.already = true
		return r, nil
	}
	if cur.State != domain.ArtifactSealed || now.Before(cur.Expires) {
		// Only sealed artifacts are in the index and their expiry never
		// changes; anything else is a record this job must not touch.
		return r, fmt.Errorf("state %s, expires %s: not a due sealed artifact", cur.State, cur.Expires.Format(time.RFC3339))
	}
	prefix := blob.Prefix(cur.OrgID, cur.ID)
	if r.objects, err = blobs.DeletePrefix(ctx, prefix); err != nil {
		return r, err
	}
	if r.uploads, err = blobs.AbortUploads(ctx, prefix); err != nil {
		// The objects are gone, which is what expiry promises; leftovers of
		// an upload are not readable and the lifecycle rule removes them.
		r.uploadsFailed = true
		log.WarnContext(ctx, "expiry: multipart leftovers not aborted", "org", cur.OrgID, "artifact", cur.ID, "err", err)
	}
	err = st.ExpireArtifact(ctx, cur.OrgID, cur.ID, now)
	if domain.ErrorCode(err) == domain.CodeConflict {
		// The state changed between ExpireArtifact's read and write: only an
		// overlapping run tombstoning it can do that.
		r.already = true
		return r, nil
	}
	return r, err
}
