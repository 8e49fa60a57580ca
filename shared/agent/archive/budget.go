package agent

import (
	"fmt"
	"math"
)

// ArchiveLimits bound what the archives of one environment, its snapshot and
// every share's archive together, may unpack to: a few kilobytes of
// compressed archive can otherwise stand for millions of files or gigabytes
// of zeros, and a member could fill a node's disk or inodes with a harmless
// template. Zero takes the default; a negative value turns the limit off.
type ArchiveLimits struct {
	// MaxEntries bounds the entries unpacked (files, folders, links): each
	// takes an inode or a folder entry (default DefaultArchiveMaxEntries).
	MaxEntries int64
	// MaxBytes bounds the size of the regular files unpacked (default
	// DefaultArchiveMaxBytes).
	MaxBytes int64
	// MaxRatio bounds the bytes unpacked per byte of archive as downloaded
	// (compressed), beyond the first RatioAllowance bytes, which any
	// environment may unpack whatever its archives' size (default
	// DefaultArchiveMaxRatio).
	MaxRatio float64
}

// Default archive limits. 250,000 entries hold a large monorepo with its
// node_modules (a big JavaScript project's node_modules is 100,000 to
// 200,000 files); 8 GiB holds a sizeable workspace while a node of 8
// environments keeps the total bounded. Source trees, dependencies and
// databases compress 3 to 20 times with zstd or gzip, logs and sparse data
// files up to some 50 times; 100 lets all of that through and stops
// archives of zeros, which compress over 1000 times (1 GiB of zeros is 33 KB
// as .tar.zst). The allowance lets a small archive of a few zero-filled or
// sparse files through, which no ratio would judge fairly.
const (
	DefaultArchiveMaxEntries = 250_000
	DefaultArchiveMaxBytes   = 8 << 30
	DefaultArchiveMaxRatio   = 100
	RatioAllowance           = 64 << 20
)

// The agent flags that set each limit, named in the errors so an operator
// knows what to raise.
const (
	flagMaxEntries = "-archive-max-entries"
	flagMaxBytes   = "-archive-max-bytes"
	flagMaxRatio   = "-archive-max-ratio"
)

// roomEvery: how often, in entries and in bytes, an unpacking asks whether
// the node still has room (Budget.Room), so environments unpacking at once
// cannot fill the node between two claims.
const (
	roomEveryEntries = 1024
	roomEveryBytes   = 64 << 20
)

// withDefaults fills the limits left at zero.
func (l ArchiveLimits) withDefaults() ArchiveLimits {
	if l.MaxEntries == 0 {
		l.MaxEntries = DefaultArchiveMaxEntries
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultArchiveMaxBytes
	}
	if l.MaxRatio == 0 {
		l.MaxRatio = DefaultArchiveMaxRatio
	}
	return l
}

// Budget counts what the archives of one environment have unpacked, against
// its ArchiveLimits: one Budget is passed to every UnpackTarRoot of the
// environment, in turn (it is not safe for concurrent use).
type Budget struct {
	limits ArchiveLimits
	// Room, when set, says whether the node still has room; it is asked
	// every roomEveryEntries entries and roomEveryBytes bytes, and an error
	// ends the unpacking with it.
	Room func() error

	entries, bytes, packed int64
	// archives counts the archives begun; unsized whether one of them had
	// no known size, which leaves the ratio unjudged.
	archives int
	unsized  bool
	// nextEntries and nextBytes are where Room is asked next.
	nextEntries, nextBytes int64
}

// NewBudget returns an empty budget under limits (zero fields take the
// defaults).
func NewBudget(limits ArchiveLimits) *Budget {
	return &Budget{limits: limits.withDefaults(), nextEntries: roomEveryEntries, nextBytes: roomEveryBytes}
}

// begin starts an archive of packed bytes as downloaded (0: unknown).
func (b *Budget) begin(packed int64) {
	b.archives++
	if packed <= 0 {
		b.unsized = true
		return
	}
	b.packed += packed
}

// Entries and Bytes say what the budget has counted so far.
func (b *Budget) Entries() int64 { return b.entries }
func (b *Budget) Bytes() int64   { return b.bytes }

// entry counts one entry of size bytes (0 but for a regular file) before it
// is written, and refuses it when it would pass a limit.
func (b *Budget) entry(size int64) error {
	l := b.limits
	if l.MaxEntries > 0 && b.entries+1 > l.MaxEntries {
		return &LimitError{Limit: flagMaxEntries, what: b.what(), detail: fmt.Sprintf("exceed%s %d entries", b.verbS(), l.MaxEntries)}
	}
	total := b.bytes + size
	if size < 0 || total < b.bytes {
		total = math.MaxInt64
	}
	if l.MaxBytes > 0 && total > l.MaxBytes {
		return &LimitError{Limit: flagMaxBytes, what: b.what(), detail: "exceed" + b.verbS() + " " + sizeText(l.MaxBytes) + " unpacked"}
	}
	if l.MaxRatio > 0 && !b.unsized && total > RatioAllowance && float64(total) > l.MaxRatio*float64(b.packed) {
		return &LimitError{Limit: flagMaxRatio, what: b.what(), detail: fmt.Sprintf(
			"would unpack to %s from %s of archive: more than %g times %s size beyond the first %s",
			sizeText(total), sizeText(b.packed), l.MaxRatio, b.their(), sizeText(RatioAllowance))}
	}
	b.entries++
	b.bytes = total
	if b.Room != nil && (b.entries >= b.nextEntries || b.bytes >= b.nextBytes) {
		b.nextEntries = b.entries + roomEveryEntries
		b.nextBytes = b.bytes + roomEveryBytes
		if err := b.Room(); err != nil {
			return err
		}
	}
	return nil
}

// what names what passed the limit: the archive alone, or with those
// unpacked before it into the same environment.
func (b *Budget) what() string {
	if b.archives > 1 {
		return "the environment's archives"
	}
	return "the archive"
}

// verbS and their agree with what.
func (b *Budget) verbS() string {
	if b.archives > 1 {
		return ""
	}
	return "s"
}

func (b *Budget) their() string {
	if b.archives > 1 {
		return "their"
	}
	return "its"
}

// LimitError is an archive refused for passing one of the ArchiveLimits.
type LimitError struct {
	// Limit is the agent flag that sets the limit passed.
	Limit  string
	what   string
	detail string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s %s (agent limit %s)", e.what, e.detail, e.Limit)
}

// sizeText writes n bytes for a person: 1.5 GiB, 33.1 KiB, 512 B.
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// budget is a new environment's archive budget: the configured limits, and
// the node's floors of free disk and inodes asked as it unpacks.
func (a *Agent) budget() *Budget {
	b := NewBudget(a.cfg.Archives)
	b.Room = a.noRoom
	return b
}
