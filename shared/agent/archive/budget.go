// Package archive reads and unpacks the archives that come from members
// (share and snapshot archives, checkpoints; image layers apply through
// package image on the same Reader): every pass over an archive goes through
// Reader, which holds each entry to Limits (entries, the length of a name,
// the bytes of all names, the bytes of files) before the caller keeps
// anything of it, and UnpackTarRoot writes what passes through an os.Root.
// See docs/security.md, "Archives from members".
package archive

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Limits bound what the archives of one environment, its snapshot and
// every share's archive together, may unpack to: a few kilobytes of
// compressed archive can otherwise stand for millions of files, gigabytes
// of zeros or of names, and a member could fill a node's disk or inodes, or
// the agent's memory, with a harmless template. Zero takes the default; a
// negative value turns the limit off.
type Limits struct {
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
	// MaxNameBytes bounds the name of one entry, and the target of a link
	// (default DefaultMaxNameBytes). It is checked as soon as the header
	// is read, before the name is kept or written anywhere.
	MaxNameBytes int64
	// MaxNamesBytes bounds the bytes of all names of the archives together,
	// the folders their names imply included (default
	// DefaultMaxNamesBytes): whatever keeps names of an archive in memory
	// (a checkpoint's first pass, the list an unpacking undoes, an image
	// layer's opaque whiteouts) keeps at most that much.
	MaxNamesBytes int64
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
//
// 4096 bytes is Linux's PATH_MAX: no path a program can open is longer,
// and tar writers already need PAX records past 100 bytes. 64 MiB of names
// is 250,000 names of 256 bytes, more than a deep node_modules takes; the
// audit's checkpoint of 2,000 names of 1 MB (2 GB of names in 100 KB of
// zstd) is refused at its first name.
const (
	DefaultMaxEntries    = 250_000
	DefaultMaxBytes      = 8 << 30
	DefaultMaxRatio      = 100
	DefaultMaxNameBytes  = 4096
	DefaultMaxNamesBytes = 64 << 20
	RatioAllowance       = 64 << 20
)

// The agent flags that set each limit, named in the errors so an operator
// knows what to raise.
const (
	flagMaxEntries    = "-archive-max-entries"
	flagMaxBytes      = "-archive-max-bytes"
	flagMaxRatio      = "-archive-max-ratio"
	flagMaxNameBytes  = "-archive-max-name"
	flagMaxNamesBytes = "-archive-max-names"
)

// roomEvery: how often, in entries and in bytes, an unpacking asks whether
// the node still has room (Budget.Room), so environments unpacking at once
// cannot fill the node between two claims.
const (
	roomEveryEntries = 1024
	roomEveryBytes   = 64 << 20
)

// WithDefaults fills the limits left at zero.
func (l Limits) WithDefaults() Limits {
	if l.MaxEntries == 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxRatio == 0 {
		l.MaxRatio = DefaultMaxRatio
	}
	if l.MaxNameBytes == 0 {
		l.MaxNameBytes = DefaultMaxNameBytes
	}
	if l.MaxNamesBytes == 0 {
		l.MaxNamesBytes = DefaultMaxNamesBytes
	}
	return l
}

// Budget counts what the archives of one environment have unpacked, against
// its Limits: one Budget is passed to every UnpackTarRoot of the
// environment, in turn (it is not safe for concurrent use). A pass that
// only reads an archive (a checkpoint's first pass) counts against a Budget
// of its own under the same Limits (Budget.Limits).
type Budget struct {
	limits Limits
	// Room, when set, says whether the node still has room; it is asked
	// every roomEveryEntries entries and roomEveryBytes bytes, and an error
	// ends the unpacking with it.
	Room func() error

	entries, bytes, namesBytes, packed int64
	// archives counts the archives begun; unsized whether one of them had
	// no known size, which leaves the ratio unjudged.
	archives int
	unsized  bool
	// nextEntries and nextBytes are where Room is asked next.
	nextEntries, nextBytes int64
	// fixed: the limits are not the agent's flags (an image's), so the
	// errors name none.
	fixed bool
}

// NewBudget returns an empty budget under limits (zero fields take the
// defaults).
func NewBudget(limits Limits) *Budget {
	return &Budget{limits: limits.WithDefaults(), nextEntries: roomEveryEntries, nextBytes: roomEveryBytes}
}

// Fixed marks limits that no agent flag sets (an image's): their errors
// name no flag.
func (b *Budget) Fixed() *Budget {
	b.fixed = true
	return b
}

// limit is the error of passing the limit that flag sets.
func (b *Budget) limit(flag, what, detail string) *LimitError {
	if b.fixed {
		flag = ""
	}
	return &LimitError{Limit: flag, what: what, detail: detail}
}

// Limits are the budget's limits, defaults filled in.
func (b *Budget) Limits() Limits { return b.limits }

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

// name counts the name of an entry (or a folder its name implies) and
// refuses one past the length or total limits. A link's target is held to
// the length limit (name with total false).
func (b *Budget) name(n string, total bool) error {
	l := b.limits
	if l.MaxNameBytes > 0 && int64(len(n)) > l.MaxNameBytes {
		return b.limit(flagMaxNameBytes, "a name of "+sizeText(int64(len(n))), fmt.Sprintf("exceeds %d bytes", l.MaxNameBytes))
	}
	if !total {
		return nil
	}
	return b.names(int64(len(n)))
}

// names counts n bytes of names (or of other header records) against the
// total.
func (b *Budget) names(n int64) error {
	if l := b.limits; l.MaxNamesBytes > 0 && b.namesBytes+n > l.MaxNamesBytes {
		return b.limit(flagMaxNamesBytes, b.what(), "exceed"+b.verbS()+" "+sizeText(l.MaxNamesBytes)+" of names")
	}
	b.namesBytes += n
	return nil
}

// Quote quotes an entry's name for a message: whole when it is within the
// length limit, else its first 64 bytes and its length, so that an error
// about a name that was refused for its length is not as long as the name.
func (b *Budget) Quote(n string) string {
	if b == nil || b.limits.MaxNameBytes <= 0 || int64(len(n)) <= b.limits.MaxNameBytes {
		return strconv.Quote(n)
	}
	cut := min(64, len(n)-1)
	for cut > 0 && !utf8.RuneStart(n[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%s)", strconv.Quote(n[:cut]), sizeText(int64(len(n))))
}

// entry counts one entry of size bytes (0 but for a regular file) before it
// is written, and refuses it when it would pass a limit.
func (b *Budget) entry(size int64) error {
	l := b.limits
	if l.MaxEntries > 0 && b.entries+1 > l.MaxEntries {
		return b.limit(flagMaxEntries, b.what(), fmt.Sprintf("exceed%s %d entries", b.verbS(), l.MaxEntries))
	}
	total := b.bytes + size
	if size < 0 || total < b.bytes {
		total = math.MaxInt64
	}
	if l.MaxBytes > 0 && total > l.MaxBytes {
		return b.limit(flagMaxBytes, b.what(), "exceed"+b.verbS()+" "+sizeText(l.MaxBytes)+" unpacked")
	}
	if l.MaxRatio > 0 && !b.unsized && total > RatioAllowance && float64(total) > l.MaxRatio*float64(b.packed) {
		return b.limit(flagMaxRatio, b.what(), fmt.Sprintf(
			"would unpack to %s from %s of archive: more than %g times %s size beyond the first %s",
			sizeText(total), sizeText(b.packed), l.MaxRatio, b.their(), sizeText(RatioAllowance)))
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
	if e.Limit == "" {
		return e.what + " " + e.detail
	}
	return fmt.Sprintf("%s %s (agent limit %s)", e.what, e.detail, e.Limit)
}

// SizeText writes n bytes for a person: 1.5 GiB, 33.1 KiB, 512 B.
func SizeText(n int64) string { return sizeText(n) }

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
