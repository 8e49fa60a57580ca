package agent

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

// checkpointTimeout bounds one checkpoint from its order to its upload.
const checkpointTimeout = 30 * time.Minute

// checkpointOrdered takes the ordered checkpoint of an environment the node
// runs, once per checkpoint id however often it is ordered (a push and the
// heartbeat both carry it), in the background.
func (a *Agent) checkpointOrdered(ctx context.Context, node, envID string, o *nodes.CheckpointOrder) {
	if o == nil || o.ID == "" {
		return
	}
	r := a.env(envID)
	if r == nil {
		return
	}
	if _, taken := r.checkpoints.LoadOrStore(o.ID, true); taken {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
		defer cancel()
		log := a.log.With("environment", envID, "checkpoint", o.ID)
		packed, err := a.checkpoint(ctx, node, r, o, log)
		if err != nil {
			log.Warn("checkpoint failed", "err", err)
			packed = nodes.CheckpointPacked{Error: err.Error()}
		}
		if _, err := a.checkpointCall(ctx, nodes.MsgCheckpointDone, node, envID, o.ID, packed); err != nil {
			log.Warn("checkpoint's end not recorded", "err", err)
		}
	}()
}

// checkpoint packs the environment (frozen while packed), asks for the
// artifact's upload and uploads it.
func (a *Agent) checkpoint(ctx context.Context, node string, r *runningEnv, o *nodes.CheckpointOrder, log *slog.Logger) (nodes.CheckpointPacked, error) {
	hp := r.h.Load()
	if hp == nil {
		return nodes.CheckpointPacked{}, errors.New("the environment is not running")
	}
	cp, ok := (*hp).(runtimes.Checkpointer)
	if !ok {
		return nodes.CheckpointPacked{}, errors.New("its runtime cannot checkpoint")
	}
	// The archive goes to the node's disk first: not below its floor.
	if err := a.noRoom(); err != nil {
		return nodes.CheckpointPacked{}, err
	}
	tmp, err := os.CreateTemp(a.cfg.WorkDir, "checkpoint-*")
	if err != nil {
		return nodes.CheckpointPacked{}, err
	}
	_ = os.Remove(tmp.Name())
	defer tmp.Close()

	began := time.Now()
	m, err := packFrozen(ctx, cp, tmp, domain.CheckpointManifest{
		Version: checkpointVersion, Environment: r.id, Template: r.env.Template, Runtime: r.env.Needs.Runtime, Created: began.UTC(),
	}, (*hp).Files().Reserved)
	if err != nil {
		return nodes.CheckpointPacked{}, err
	}
	packed := nodes.CheckpointPacked{}
	for _, f := range m.Files {
		if f.Type == domain.CheckpointTypeFile {
			packed.Files++
			packed.Bytes += f.Size
		}
	}
	partSize := o.PartSize
	if partSize <= 0 {
		partSize = artifacts.DefaultPartSize
	}
	if err := digests(tmp, partSize, &packed); err != nil {
		return packed, err
	}
	log.Info("checkpoint packed", "files", packed.Files, "bytes", packed.Bytes, "size", packed.Size, "skipped", len(m.Skipped), "frozen", m.Frozen, "took", time.Since(began).Round(time.Millisecond))

	ans, err := a.checkpointCall(ctx, nodes.MsgCheckpointUpload, node, r.id, o.ID, packed)
	if err == nil && ans.Uploading != nil && ans.Uploading.PartSize > 0 && ans.Uploading.Artifact.ID == "" {
		// Declared for another part size than the service's: again for its.
		if err := digests(tmp, ans.Uploading.PartSize, &packed); err != nil {
			return packed, err
		}
		ans, err = a.checkpointCall(ctx, nodes.MsgCheckpointUpload, node, r.id, o.ID, packed)
	}
	if err != nil {
		return packed, err
	}
	if ans.Uploading == nil || ans.Uploading.Artifact.ID == "" {
		return packed, errors.New("the service answered the upload request without an artifact")
	}
	for _, p := range ans.Uploading.Upload.Parts {
		if err := a.putPart(ctx, tmp, p); err != nil {
			return packed, fmt.Errorf("upload part %d: %w", p.PartNumber, err)
		}
	}
	return packed, nil
}

// packFrozen packs the environment's changes with its processes frozen,
// and thaws them however packing went.
func packFrozen(ctx context.Context, cp runtimes.Checkpointer, w io.Writer, m domain.CheckpointManifest, reserved []string) (*domain.CheckpointManifest, error) {
	thaw, how, err := cp.Freeze(ctx)
	if err != nil {
		return nil, fmt.Errorf("freeze: %w", err)
	}
	m.Frozen = how
	err = packCheckpoint(cp.CheckpointDir(), w, &m, reserved)
	if terr := thaw(); terr != nil {
		err = errors.Join(err, fmt.Errorf("thaw: %w", terr))
	}
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// digests fills the archive's size, SHA-256 and, when it is larger than
// partSize, the SHA-256 of each part.
func digests(f *os.File, partSize int64, p *nodes.CheckpointPacked) error {
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
func (a *Agent) putPart(ctx context.Context, f *os.File, p domain.UploadPart) error {
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
		if res, err = a.http.Do(req); err != nil {
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

// checkpointCall sends checkpointUpload or checkpointDone on the node
// protocol's connection when one is open, over HTTP otherwise; server and
// network errors are tried again a few times (both are repeatable).
func (a *Agent) checkpointCall(ctx context.Context, typ, node, env, id string, p nodes.CheckpointPacked) (nodes.Message, error) {
	var (
		ans nodes.Message
		err error
	)
	for try, backoff := 0, 100*time.Millisecond; try < 6; try, backoff = try+1, backoff*2 {
		if ans, err = a.checkpointSend(ctx, typ, node, env, id, p); err == nil {
			return ans, nil
		}
		if s := statusOf(err); s >= 400 && s < 500 || ctx.Err() != nil {
			return ans, err
		}
		select {
		case <-ctx.Done():
			return ans, err
		case <-time.After(backoff):
		}
	}
	return ans, err
}

func (a *Agent) checkpointSend(ctx context.Context, typ, node, env, id string, p nodes.CheckpointPacked) (nodes.Message, error) {
	if sock := a.sock.Load(); sock != nil {
		m, err := sock.call(ctx, nodes.Message{Type: typ, Node: node, Environment: env, Checkpoint: &nodes.CheckpointOrder{ID: id}, Packed: &p})
		if !errors.Is(err, errNoAnswer) {
			return m, err
		}
	}
	return a.api.checkpoint(ctx, typ, node, env, id, p)
}

// checkpoint is the HTTP side of checkpointUpload and checkpointDone,
// answered as the node protocol would.
func (c *Client) checkpoint(ctx context.Context, typ, node, env, id string, p nodes.CheckpointPacked) (nodes.Message, error) {
	base := "/v1/nodes/" + url.PathEscape(node) + "/environments/" + url.PathEscape(env) + "/checkpoints/" + url.PathEscape(id)
	if typ == nodes.MsgCheckpointUpload {
		var out nodes.CheckpointUploading
		_, err := c.do(ctx, http.MethodPost, base+"/upload", p, &out)
		return nodes.Message{Type: nodes.MsgCheckpointUploading, Uploading: &out}, err
	}
	var out struct {
		Checkpoint domain.Checkpoint `json:"checkpoint"`
	}
	_, err := c.do(ctx, http.MethodPost, base+"/done", p, &out)
	return nodes.Message{Type: nodes.MsgCheckpointed, Checkpointed: &out.Checkpoint}, err
}
