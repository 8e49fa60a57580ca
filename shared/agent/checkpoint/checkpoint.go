// Package checkpoint takes and restores an environment's checkpoints
// (docs/environments.md, "Checkpoints"; the node protocol's part in
// docs/nodes.md): Take freezes the environment, packs what it changed into a
// tar.zst whose last entry is its manifest, and uploads it in the parts the
// service presigned; Restore reads a checkpoint artifact in three passes (its
// manifest and names, bounded by the environment's archive limits; its
// entries through the confined unpacker; every file against the manifest).
// The agent only wires it: it passes the environment's runtime handle, the
// node protocol's calls and the downloaded artifact.
package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// Version is the manifest's version this agent writes and reads.
const Version = 1

// Timeout bounds one checkpoint from its order to its upload.
const Timeout = 30 * time.Minute

// Call sends checkpointUpload or checkpointDone (typ) with p for the
// checkpoint being taken, and returns the service's answer.
type Call func(ctx context.Context, typ string, p nodes.CheckpointPacked) (nodes.Message, error)

// Take is one checkpoint to take.
type Take struct {
	// Handle is the environment's; its runtime must be a
	// runtimes.Checkpointer.
	Handle runtimes.Handle
	// Manifest is the manifest's description of the environment; Take
	// fills its version, files, skips and how it was frozen.
	Manifest domain.CheckpointManifest
	// Order is the service's order.
	Order nodes.CheckpointOrder
	// TempDir holds the archive while it is uploaded (the agent's work
	// dir); Room, when set, says whether the node has room for it.
	TempDir string
	Room    func() error
	Call    Call
	HTTP    *http.Client
	Log     *slog.Logger
}

// Run packs the environment (frozen while packed), asks for the artifact's
// upload and uploads it. What it returns is what checkpointDone says.
func (t Take) Run(ctx context.Context) (nodes.CheckpointPacked, error) {
	cp, ok := t.Handle.(runtimes.Checkpointer)
	if !ok {
		return nodes.CheckpointPacked{}, errors.New("its runtime cannot checkpoint")
	}
	// The archive goes to the node's disk first: not below its floor.
	if t.Room != nil {
		if err := t.Room(); err != nil {
			return nodes.CheckpointPacked{}, err
		}
	}
	tmp, err := os.CreateTemp(t.TempDir, "checkpoint-*")
	if err != nil {
		return nodes.CheckpointPacked{}, err
	}
	_ = os.Remove(tmp.Name())
	defer tmp.Close()

	began := time.Now()
	m := t.Manifest
	m.Version, m.Created = Version, began.UTC()
	packed, err := PackFrozen(ctx, cp, tmp, &m, t.Handle.Files().Reserved)
	if err != nil {
		return nodes.CheckpointPacked{}, err
	}
	p := nodes.CheckpointPacked{}
	for _, f := range packed.Files {
		if f.Type == domain.CheckpointTypeFile {
			p.Files++
			p.Bytes += f.Size
		}
	}
	partSize := t.Order.PartSize
	if partSize <= 0 {
		partSize = artifacts.DefaultPartSize
	}
	if err := Digests(tmp, partSize, &p); err != nil {
		return p, err
	}
	t.Log.Info("checkpoint packed", "files", p.Files, "bytes", p.Bytes, "size", p.Size, "skipped", len(packed.Skipped), "frozen", packed.Frozen, "took", time.Since(began).Round(time.Millisecond))

	ans, err := t.Call(ctx, nodes.MsgCheckpointUpload, p)
	if err == nil && ans.Uploading != nil && ans.Uploading.PartSize > 0 && ans.Uploading.Artifact.ID == "" {
		// Declared for another part size than the service's: again for its.
		if err := Digests(tmp, ans.Uploading.PartSize, &p); err != nil {
			return p, err
		}
		ans, err = t.Call(ctx, nodes.MsgCheckpointUpload, p)
	}
	if err != nil {
		return p, err
	}
	if ans.Uploading == nil || ans.Uploading.Artifact.ID == "" {
		return p, errors.New("the service answered the upload request without an artifact")
	}
	for _, part := range ans.Uploading.Upload.Parts {
		if err := putPart(ctx, t.HTTP, tmp, part); err != nil {
			return p, fmt.Errorf("upload part %d: %w", part.PartNumber, err)
		}
	}
	return p, nil
}

// PackFrozen packs the environment's changes with its processes frozen,
// and thaws them however packing went; m gets how it was frozen.
func PackFrozen(ctx context.Context, cp runtimes.Checkpointer, w io.Writer, m *domain.CheckpointManifest, reserved []string) (*domain.CheckpointManifest, error) {
	thaw, how, err := cp.Freeze(ctx)
	if err != nil {
		return nil, fmt.Errorf("freeze: %w", err)
	}
	m.Frozen = how
	err = Pack(cp.CheckpointDir(), w, m, reserved)
	if terr := thaw(); terr != nil {
		err = errors.Join(err, fmt.Errorf("thaw: %w", terr))
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Digests fills the archive's size, SHA-256 and, when it is larger than
// partSize, the SHA-256 of each part.
func Digests(f *os.File, partSize int64, p *nodes.CheckpointPacked) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	whole := sha256.New()
	p.Parts, p.PartSize = nil, partSize
	var size int64
	for {
		part := sha256.New()
		n, err := io.CopyN(io.MultiWriter(whole, part), f, partSize)
		size += n
		if n > 0 {
			p.Parts = append(p.Parts, hex.EncodeToString(part.Sum(nil)))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	p.Size, p.SHA256 = size, hex.EncodeToString(whole.Sum(nil))
	if size <= partSize {
		p.Parts = nil
	}
	return nil
}

// putPart sends one presigned part of the archive, retrying a few times.
func putPart(ctx context.Context, client *http.Client, f *os.File, p domain.UploadPart) error {
	method := p.Method
	if method == "" {
		method = http.MethodPut
	}
	var err error
	for try, backoff := 0, 200*time.Millisecond; try < 4; try, backoff = try+1, backoff*2 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(backoff):
			}
		}
		var req *http.Request
		req, err = http.NewRequestWithContext(ctx, method, p.URL, io.NewSectionReader(f, p.Offset, p.Size))
		if err != nil {
			return err
		}
		req.ContentLength = p.Size
		if p.Size == 0 {
			req.Body = http.NoBody
		}
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		var res *http.Response
		if res, err = client.Do(req); err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if res.StatusCode/100 == 2 {
			return nil
		}
		err = fmt.Errorf("%s %s: HTTP %d", method, redacted(p.URL), res.StatusCode)
		if res.StatusCode/100 == 4 {
			return err
		}
	}
	return err
}

// redacted is a presigned URL without its signature, for messages.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the upload URL"
	}
	u.RawQuery = ""
	return u.String()
}
