package archive

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Reader reads a tar stream and holds every entry to a Budget as soon as
// its header is read: the length of its name and link target, the bytes
// of all names, the count of entries and the bytes of files (with the ratio
// to the archive's packed size). A header past a limit ends the pass with a
// LimitError that names the entry (its name cut when the name is what was
// too long), before the caller keeps or writes anything of it.
//
// What archive/tar itself holds while it reads a header is bounded by the
// library: a PAX or GNU long-name record is read into memory only up to
// 1 MiB, and a larger one is an error. So one header costs at most about
// 1 MiB, once, and the first name past MaxNameBytes ends the pass.
type Reader struct {
	tr     *tar.Reader
	budget *Budget
	// entries is false for a reader that counts names only (NewNameReader:
	// image layers, which count entries and bytes their own way, and a
	// checkpoint's second pass, whose entries UnpackTarRoot counts).
	entries bool
}

// NewReader reads the uncompressed tar stream r against budget (nil: a
// budget of the default limits), as an archive of packed bytes as
// downloaded (0: unknown; the ratio is then not judged).
func NewReader(r io.Reader, budget *Budget, packed int64) *Reader {
	if budget == nil {
		budget = NewBudget(Limits{})
	}
	budget.begin(packed)
	return &Reader{tr: tar.NewReader(r), budget: budget, entries: true}
}

// NewNameReader is NewReader that holds only the names of the entries to
// budget (their length and their total), for a caller that bounds entries
// and bytes by rules of its own.
func NewNameReader(r io.Reader, budget *Budget) *Reader {
	if budget == nil {
		budget = NewBudget(Limits{})
	}
	return &Reader{tr: tar.NewReader(r), budget: budget}
}

// Budget is what the reader counts against.
func (r *Reader) Budget() *Budget { return r.budget }

// Next reads the next entry's header and holds it to the budget. PAX
// global headers are skipped (archive/tar folds their records into later
// headers). io.EOF ends the archive.
func (r *Reader) Next() (*tar.Header, error) {
	for {
		h, err := r.tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("not a tar archive (or a damaged one): %w", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if err := r.check(h); err != nil {
			return nil, err
		}
		return h, nil
	}
}

func (r *Reader) check(h *tar.Header) error {
	b := r.budget
	if err := b.name(h.Name, true); err != nil {
		return r.refused(err, h.Name)
	}
	if h.Linkname != "" {
		if err := b.name(h.Linkname, false); err != nil {
			return fmt.Errorf("the target of entry %s: %w", b.Quote(h.Name), err)
		}
	}
	// Its other extended records (xattrs, comments, anything a writer
	// adds) count as names do: archive/tar reads up to 1 MiB of them per
	// header, and the total stops an archive made of them.
	if extra := paxBytes(h); extra > 0 {
		if err := b.names(extra); err != nil {
			return r.refused(err, h.Name)
		}
	}
	if !r.entries {
		return nil
	}
	size := int64(0)
	if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
		size = h.Size
	}
	if err := b.entry(size); err != nil {
		return r.refused(err, h.Name)
	}
	return nil
}

// paxBytes are the bytes of h's PAX records but its name and link target
// (which are counted as names).
func paxBytes(h *tar.Header) int64 {
	var n int64
	for k, v := range h.PAXRecords {
		if k != "path" && k != "linkpath" {
			n += int64(len(k) + len(v))
		}
	}
	return n
}

// refused words a limit passed at entry name.
func (r *Reader) refused(err error, name string) error {
	var limit *LimitError
	if errors.As(err, &limit) {
		return fmt.Errorf("%w, at entry %s", limit, r.budget.Quote(name))
	}
	return err
}

// Read reads the current entry's content.
func (r *Reader) Read(p []byte) (int, error) { return r.tr.Read(p) }

// maxZstdWindow bounds the memory a zstd frame may make the decoder take;
// 128 MiB still reads archives made with `zstd --long`.
const maxZstdWindow = 128 << 20

// Decompressed undoes gzip or zstd compression, told by the stream's magic
// number; anything else is passed on as it is (a plain tar). done frees the
// decoder.
func Decompressed(r io.Reader) (src io.Reader, done func(), err error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { zr.Close() }, nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}
