package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/envlog"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/logline"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// Headers of a live log answer.
const (
	// LogOffsetHeader is the offset of the answer's first byte: a follower
	// that reconnects asks for offset = it + the bytes it got.
	LogOffsetHeader = "Envlease-Log-Offset"
	// LogCutHeader, when present, says how many bytes before that offset
	// the node no longer keeps (the follower asked for them too late).
	LogCutHeader = "Envlease-Log-Cut"
)

// LogsConfig configures a live log endpoint.
type LogsConfig struct {
	// Identity is the agent's current identity, as for tunnels.
	Identity func() (TunnelIdentity, bool)
	// Logs returns the log of an environment the agent runs.
	Logs func(env string) (*envlog.Log, bool)
	// Open is the kind of ticket that opens these logs (ticket.OpenLogs
	// if empty; ticket.OpenNetLog for network logs).
	Open  string
	Clock clock.Clock
	Log   *slog.Logger
	// MaxReaders bounds the log reads served at once (followers hold
	// theirs as long as the environment runs); DefaultMaxLogReaders if 0.
	MaxReaders int
	// WriteStall is how long one write to a reader may block before the
	// reader is dropped; logWriteStall if 0.
	WriteStall time.Duration
}

// DefaultMaxLogReaders bounds the live log reads a node serves at once: each
// holds a goroutine, a buffer and the log's file, so a ticket holder must
// not open them without end.
const DefaultMaxLogReaders = 256

// logWriteStall is how long one write to a follower may block before the
// follower is dropped: one that stopped reading would otherwise hold its
// goroutine and the log's file (past the log's removal) for good.
const logWriteStall = time.Minute

// LogsHandler serves the log of an environment the agent runs at
// tunnel.LogsPath, to the holder of a ticket of kind logs naming it:
//
//	GET /logs?env=ID[&offset=N | &since=DURATION][&follow=true]
//
// The answer is the log's bytes as text/plain from offset (default the
// first byte kept), or from the first written since DURATION ago; with
// follow it stays open, sending what is written, until the environment's
// log ends (it ended) or the client leaves. A follower never slows the
// environment: it reads the node's file at its own pace, and one that fell
// more than the log's bound behind is told how much it missed.
type LogsHandler struct {
	cfg     LogsConfig
	readers atomic.Int64
}

// NewLogsHandler returns a live log endpoint.
func NewLogsHandler(cfg LogsConfig) *LogsHandler {
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Open == "" {
		cfg.Open = ticket.OpenLogs
	}
	if cfg.MaxReaders <= 0 {
		cfg.MaxReaders = DefaultMaxLogReaders
	}
	if cfg.WriteStall <= 0 {
		cfg.WriteStall = logWriteStall
	}
	return &LogsHandler{cfg: cfg}
}

func (h *LogsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeRefusal(w, refusal{http.StatusMethodNotAllowed, "a log is read with GET"})
		return
	}
	q := r.URL.Query()
	env := q.Get("env")
	l, ref := h.authorize(r, env)
	if ref == nil && !l.Hold() {
		ref = &refusal{http.StatusNotFound, "the environment's log is no longer on this node: read its kept log"}
	}
	if ref != nil {
		h.cfg.Log.Info("live log refused", "status", ref.status, "reason", ref.msg, "from", r.RemoteAddr)
		writeRefusal(w, *ref)
		return
	}
	defer l.Release()
	if h.readers.Add(1) > int64(h.cfg.MaxReaders) {
		h.readers.Add(-1)
		writeRefusal(w, refusal{http.StatusServiceUnavailable, fmt.Sprintf("the node serves %d log reads already; retry later", h.cfg.MaxReaders)})
		return
	}
	defer h.readers.Add(-1)
	start, end := l.Bounds()
	off := start
	follow := false
	for k := range q {
		var err error
		switch k {
		case "env":
		case "offset":
			off, err = strconv.ParseInt(q.Get(k), 10, 64)
			if err != nil || off < 0 {
				err = fmt.Errorf("offset must be a byte offset (0 or more)")
			}
		case "since":
			var d domain.Duration
			d, err = domain.ParseDuration(q.Get(k))
			if err != nil || d < 0 {
				err = fmt.Errorf("since must be a duration such as 5m")
			} else {
				off = l.OffsetSince(h.cfg.Clock.Now().Add(-d.Std()))
			}
		case "follow":
			follow, err = strconv.ParseBool(q.Get(k))
			if err != nil {
				err = fmt.Errorf("follow must be true or false")
			}
		default:
			err = fmt.Errorf("unknown query parameter %q: a log takes env, offset, since and follow", k)
		}
		if err != nil {
			writeRefusal(w, refusal{http.StatusBadRequest, err.Error()})
			return
		}
	}
	if q.Has("offset") && q.Has("since") {
		writeRefusal(w, refusal{http.StatusBadRequest, "give offset or since, not both"})
		return
	}
	off = min(off, end)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set(LogOffsetHeader, strconv.FormatInt(max(off, start), 10))
	if off < start {
		w.Header().Set(LogCutHeader, strconv.FormatInt(start-off, 10))
	}
	w.WriteHeader(http.StatusOK)
	h.copy(r.Context(), w, l, off, follow)
}

// copy sends the log from off; with follow, until it ends or ctx does.
func (h *LogsHandler) copy(ctx context.Context, w http.ResponseWriter, l *envlog.Log, off int64, follow bool) {
	rc := http.NewResponseController(w)
	// Each write may block for WriteStall at most (an error where the
	// writer cannot say: nothing more to do then).
	stall := func() { _ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteStall)) }
	// Send what is left under the bound, then take the deadline off: the
	// connection may serve another request (its write error, if any,
	// sticks, so nothing blocks after a stalled write).
	defer func() {
		stall()
		_ = rc.Flush()
		_ = rc.SetWriteDeadline(time.Time{})
	}()
	buf := make([]byte, 32<<10)
	first := true
	for {
		n, from, err := l.ReadAt(buf, off)
		if err != nil {
			return
		}
		if from > off && !first {
			// Fell behind by more than the bound: say so where it happened.
			stall()
			if _, err := io.WriteString(w, "\n"+logline.Note(fmt.Sprintf("[envlease] %d bytes of the log were cut before this follower read them", from-off))); err != nil {
				return
			}
		}
		first = false
		if n > 0 {
			stall()
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
			off = from + int64(n)
			continue
		}
		off = from
		if !follow {
			return
		}
		stall()
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return
		}
		if !l.Wait(ctx, off) {
			return
		}
	}
}

// authorize checks the ticket, offline, as tunnels do: signed with this
// node's key, unexpired, of kind logs, naming this node and organization and
// the environment asked for, which the agent runs.
func (h *LogsHandler) authorize(r *http.Request, env string) (*envlog.Log, *refusal) {
	tk, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tk) == "" {
		return nil, &refusal{http.StatusUnauthorized, "a live log takes a ticket (GET /v1/environments/{id}/logs) as Authorization: Bearer <ticket>"}
	}
	id, ok := h.cfg.Identity()
	if !ok {
		return nil, &refusal{http.StatusServiceUnavailable, "the node is not registered yet; retry shortly"}
	}
	c, err := ticket.Verify(id.Key, strings.TrimSpace(tk), h.cfg.Clock.Now())
	if err != nil {
		return nil, &refusal{http.StatusUnauthorized, err.Error()}
	}
	switch {
	case c.Open != h.cfg.Open:
		return nil, &refusal{http.StatusForbidden, "the ticket does not open " + map[string]string{ticket.OpenLogs: "logs", ticket.OpenNetLog: "network logs"}[h.cfg.Open]}
	case c.Org != id.Org:
		return nil, &refusal{http.StatusForbidden, "the ticket is for another organization"}
	case c.Node != id.Node:
		return nil, &refusal{http.StatusForbidden, "the ticket is for node " + c.Node + ", not this one"}
	case env != "" && env != c.Env:
		return nil, &refusal{http.StatusForbidden, "the ticket is for environment " + c.Env + ", not " + env}
	}
	l, ok := h.cfg.Logs(c.Env)
	if !ok {
		return nil, &refusal{http.StatusNotFound, "environment " + c.Env + " has no log on this node (it no longer runs here: read its kept log)"}
	}
	return l, nil
}

// endpoint is the agent's one endpoint: tunnels, and live logs and files
// beside them.
func (a *Agent) endpoint(t *tunnels) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(tunnel.LogsPath, NewLogsHandler(LogsConfig{Identity: t.identity, Logs: a.envLog, Log: a.log}))
	mux.Handle(tunnel.NetLogPath, NewLogsHandler(LogsConfig{Identity: t.identity, Logs: a.netLog, Log: a.log, Open: ticket.OpenNetLog}))
	mux.Handle(tunnel.MetricsPath, NewMetricsHandler(MetricsConfig{Identity: t.identity, Series: a.envSeries, Every: a.cfg.SampleEvery, Log: a.log}))
	mux.Handle(tunnel.FilesPath+"/", NewFilesHandler(FilesConfig{Identity: t.identity, Env: a.filesEnv, Log: a.log}))
	mux.Handle("/", t.h)
	return a.previewsFirst(t, mux)
}
