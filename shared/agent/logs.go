package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/agent/envlog"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// keepLogTimeout bounds the upload of an ended environment's log, which
// comes before its last report: a slow store must not hold that report long.
const keepLogTimeout = time.Minute

// envLogs are the logs of the environments the agent runs (docs/nodes.md,
// "Logs"): one ring file each under <WorkDir>/logs, of at most LogMax bytes,
// removed once uploaded.
type envLogs struct {
	once  sync.Once
	mu    sync.Mutex
	byEnv map[string]*envlog.Log
	// warm maps a warm environment's handle to the id its log has until
	// a lease adopts it.
	warm map[runtimes.Handle]string
}

func (a *Agent) logsDir() string { return filepath.Join(a.cfg.WorkDir, "logs") }

// openLog makes the log of environment id; nil when it cannot be made (the
// environment then runs without one, which the agent's own log says).
func (a *Agent) openLog(id string) *envlog.Log {
	a.logs.once.Do(func() {
		// What an earlier run of the agent left is of environments that
		// ended with it.
		_ = os.RemoveAll(a.logsDir())
		a.logs.byEnv = map[string]*envlog.Log{}
	})
	if err := os.MkdirAll(a.logsDir(), 0o700); err != nil {
		a.log.Warn("the environment runs without a log", "environment", id, "err", err)
		return nil
	}
	l, err := envlog.Create(filepath.Join(a.logsDir(), id+".log"), a.cfg.LogMax, time.Now)
	if err != nil {
		a.log.Warn("the environment runs without a log", "environment", id, "err", err)
		return nil
	}
	a.logs.mu.Lock()
	a.logs.byEnv[id] = l
	a.logs.mu.Unlock()
	return l
}

// envLog is the log of an environment the agent runs.
func (a *Agent) envLog(id string) (*envlog.Log, bool) {
	a.logs.mu.Lock()
	defer a.logs.mu.Unlock()
	l, ok := a.logs.byEnv[id]
	return l, ok && l != nil
}

// logf writes one of the agent's own lines to environment id's log.
func (a *Agent) logf(id, format string, args ...any) {
	if l, ok := a.envLog(id); ok {
		l.Notef(format, args...)
	}
}

// logOutput is where the runtime sends environment id's output: its log,
// or nowhere when it has none.
func (a *Agent) logOutput(id string) io.Writer {
	if l, ok := a.envLog(id); ok {
		return l
	}
	return io.Discard
}

// keepLog ends environment id's log, uploads it as an artifact of the
// environment's organization that the environment links to (nodes.KeepLog),
// and removes it from the node. Failing to keep it is logged: the
// environment's end is reported all the same.
func (a *Agent) keepLog(ctx context.Context, node, id string) {
	a.logs.mu.Lock()
	l := a.logs.byEnv[id]
	delete(a.logs.byEnv, id)
	a.logs.mu.Unlock()
	a.keepRing(ctx, node, id, l, "")
}

// keepRing ends a log of environment id (kind "" its log, "network" its
// network log), uploads it as the environment's artifact and removes it
// from the node; failing to keep it is logged.
func (a *Agent) keepRing(ctx context.Context, node, id string, l *envlog.Log, kind string) {
	if l == nil {
		return
	}
	defer l.Remove()
	l.Close()
	ctx, cancel := context.WithTimeout(ctx, keepLogTimeout)
	defer cancel()
	if err := a.uploadLog(ctx, node, id, l, kind); err != nil {
		a.log.Warn("an environment's log was not kept", "environment", id, "kind", kind, "err", err)
	}
}

// uploadLog keeps l as the environment's log, or with kind "network" its
// network log.
func (a *Agent) uploadLog(ctx context.Context, node, id string, l *envlog.Log, kind string) error {
	// The log is read twice, for its digest and for the upload, rather
	// than held in memory: many environments may end at once.
	h := sha256.New()
	size, err := l.Kept(h)
	if err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	sum := h.Sum(nil)
	var c artifacts.Created
	path := "/v1/nodes/" + url.PathEscape(node) + "/environments/" + url.PathEscape(id) + "/log"
	q := ""
	if kind != "" {
		q = "?kind=" + url.QueryEscape(kind)
	}
	if _, err := a.api.do(ctx, http.MethodPost, path+q, nodes.LogRequest{Size: &size, SHA256: hex.EncodeToString(sum)}, &c); err != nil {
		return err
	}
	if len(c.Upload.Parts) != 1 || c.Upload.Multipart {
		return fmt.Errorf("the API asked for an upload of %d parts; a log goes up in one", len(c.Upload.Parts))
	}
	p := c.Upload.Parts[0]
	req, err := http.NewRequestWithContext(ctx, p.Method, p.URL, keptReader(l))
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.GetBody = func() (io.ReadCloser, error) { return keptReader(l), nil }
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	hc := a.cfg.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("upload: %s", res.Status)
	}
	var done struct {
		Artifact domain.Artifact `json:"artifact"`
	}
	if _, err := a.api.do(ctx, http.MethodPost, path+"/complete"+q, nil, &done); err != nil {
		return err
	}
	a.log.Info("log kept", "environment", id, "kind", cmp.Or(kind, "log"), "artifact", done.Artifact.ID, "bytes", size)
	return nil
}

// keptReader reads what l keeps (Kept), as it is written, without holding
// it: the upload's body. Closing it ends the read (the HTTP client closes
// a request's body whatever happens).
func keptReader(l *envlog.Log) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		if !l.Hold() {
			pw.CloseWithError(errors.New("the log was removed"))
			return
		}
		defer l.Release()
		_, err := l.Kept(pw)
		pw.CloseWithError(err)
	}()
	return pr
}

// warmLog makes the log of a warm environment, which it adopts if it is
// handed to a lease (adoptWarmLog).
func (a *Agent) warmLog(id string) io.Writer {
	if l := a.openLog(id); l != nil {
		return l
	}
	return io.Discard
}

// warmPrepared remembers which log a warm environment's handle writes to.
func (a *Agent) warmPrepared(id string, h runtimes.Handle) {
	if h == nil {
		return
	}
	a.logs.mu.Lock()
	defer a.logs.mu.Unlock()
	if a.logs.warm == nil {
		a.logs.warm = map[runtimes.Handle]string{}
	}
	a.logs.warm[h] = id
}

// adoptWarmLog makes the log of the warm environment h the log of the
// environment id it was handed to.
func (a *Agent) adoptWarmLog(h runtimes.Handle, id string) {
	a.logs.mu.Lock()
	warm, ok := a.logs.warm[h]
	delete(a.logs.warm, h)
	if l := a.logs.byEnv[warm]; ok && l != nil {
		delete(a.logs.byEnv, warm)
		a.logs.byEnv[id] = l
	}
	a.logs.mu.Unlock()
	if _, ok := a.envLog(id); !ok {
		a.openLog(id)
	}
}

// dropWarmLog removes the log of a warm environment that served no lease.
func (a *Agent) dropWarmLog(h runtimes.Handle) {
	if h == nil {
		return
	}
	a.logs.mu.Lock()
	id, ok := a.logs.warm[h]
	delete(a.logs.warm, h)
	a.logs.mu.Unlock()
	if ok {
		a.dropLog(id)
	}
}

// dropLog removes a log without keeping it.
func (a *Agent) dropLog(id string) {
	a.logs.mu.Lock()
	l := a.logs.byEnv[id]
	delete(a.logs.byEnv, id)
	a.logs.mu.Unlock()
	if l != nil {
		l.Remove()
	}
}

// noteFailure says in environment id's log why it failed (the first line
// of err: the rest, such as its last lines of stderr, is in the log
// already), making the log if the environment failed before it had one.
func (a *Agent) noteFailure(id string, err error) {
	if _, ok := a.envLog(id); !ok {
		a.openLog(id)
	}
	first, _, _ := strings.Cut(err.Error(), "\n")
	a.logf(id, "failed: %s", strings.TrimSuffix(first, "; last lines of stderr:"))
}

// exportsText lists exports for the log: " (web at 127.0.0.1:8080, ...)".
func exportsText(exports []nodes.ExportTarget) string {
	if len(exports) == 0 {
		return ""
	}
	parts := make([]string, len(exports))
	for i, x := range exports {
		parts[i] = x.Service + " at " + x.Target
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
