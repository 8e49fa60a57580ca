package agent

import (
	"context"
	"encoding/json"
	"errors"

	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/envfs"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/envfiles"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// DefaultMaxFileRequests bounds the file requests one environment has at
// once: each holds descriptors, a buffer and a goroutine of the agent's,
// and a watch holds them as long as it lasts.
const DefaultMaxFileRequests = 32

// fileBuffer is the one buffer a request's bytes go through, whatever the
// file's size: the agent's memory never grows with a file.
const fileBuffer = 64 << 10

var fileBuffers = sync.Pool{New: func() any { b := make([]byte, fileBuffer); return &b }}

// FilesEnv is an environment whose files the endpoint serves.
type FilesEnv struct {
	Root envfs.Root
	// Done is closed when the environment is being stopped: its watches end.
	Done <-chan struct{}
	// Slots counts its requests now.
	Slots *atomic.Int64
}

// FilesConfig configures a files endpoint.
type FilesConfig struct {
	// Identity is the agent's current identity, as for tunnels.
	Identity func() (TunnelIdentity, bool)
	// Env finds a ready environment the agent runs.
	Env   func(id string) (FilesEnv, bool)
	Clock clock.Clock
	Log   *slog.Logger
	// MaxPerEnv bounds one environment's requests at once
	// (DefaultMaxFileRequests if 0).
	MaxPerEnv int
}

// FilesHandler serves environments' files at tunnel.FilesPath to holders
// of a files ticket (docs/files.md): read, write, stat, list, mkdir,
// remove and watch, each confined by package envfs.
type FilesHandler struct{ cfg FilesConfig }

// NewFilesHandler returns a files endpoint.
func NewFilesHandler(cfg FilesConfig) *FilesHandler {
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxPerEnv <= 0 {
		cfg.MaxPerEnv = DefaultMaxFileRequests
	}
	return &FilesHandler{cfg: cfg}
}

// fileRoutes are the routes, with their method and whether they change
// files.
var fileRoutes = map[string]struct {
	method string
	write  bool
}{
	envfiles.RouteRead: {http.MethodGet, false}, envfiles.RouteStat: {http.MethodGet, false},
	envfiles.RouteList: {http.MethodGet, false}, envfiles.RouteWatch: {http.MethodGet, false},
	envfiles.RouteWrite: {http.MethodPut, true}, envfiles.RouteMkdir: {http.MethodPost, true},
	envfiles.RouteRemove: {http.MethodPost, true},
}

// fileParams are the query parameters each route takes besides path.
var fileParams = map[string][]string{
	envfiles.RouteWrite: {"mode", "parents"}, envfiles.RouteMkdir: {"mode", "parents"},
	envfiles.RouteRemove: {"recursive"}, envfiles.RouteWatch: {"recursive"},
}

func (h *FilesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := strings.TrimPrefix(r.URL.Path, tunnel.FilesPath)
	spec, ok := fileRoutes[route]
	if !ok {
		h.fail(w, envfiles.Errorf(envfiles.ReasonBadParameter, "no route %s: the files endpoint has /read, /write, /stat, /list, /mkdir, /remove and /watch", r.URL.Path))
		return
	}
	if r.Method != spec.method && !(spec.method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", spec.method)
		h.fail(w, &envfiles.Error{Message: route + " takes " + spec.method, Code: "bad_request", Reason: envfiles.ReasonBadParameter, Status: http.StatusMethodNotAllowed})
		return
	}
	c, env, ferr := h.authorize(r)
	if ferr != nil {
		h.cfg.Log.Info("files refused", "status", ferr.Status, "reason", ferr.Message, "from", r.RemoteAddr)
		h.fail(w, ferr)
		return
	}
	if spec.write && !c.Write {
		h.fail(w, envfiles.Errorf(envfiles.ReasonReadOnly, "the ticket only reads: ask the API for one with \"write\": true"))
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "path" && !containsString(fileParams[route], k) {
			h.fail(w, envfiles.Errorf(envfiles.ReasonBadParameter, "unknown query parameter %q for %s", k, route))
			return
		}
	}
	p := q.Get("path")
	abs, err := env.Root.Clean(p)
	if err != nil {
		h.fail(w, err)
		return
	}
	// The ticket opens its path and what is below it: as named here, and
	// where the kernel resolves it (no link below it leads elsewhere).
	scope, err := env.Root.Clean(ticketPath(c.Path))
	if err != nil || !envfs.Within(abs, scope) {
		h.fail(w, envfiles.Errorf(envfiles.ReasonOutsideTicket, "%s is not at or below %s, which the ticket opens", abs, c.Path))
		return
	}
	env.Root.Scope = scope
	if env.Slots.Add(1) > int64(h.cfg.MaxPerEnv) {
		env.Slots.Add(-1)
		h.fail(w, envfiles.Errorf(envfiles.ReasonBusy, "environment %s has %d file requests at once already (agent limit); retry when one ended", c.Env, h.cfg.MaxPerEnv))
		return
	}
	defer env.Slots.Add(-1)
	fsys, err := envfs.Open(env.Root)
	if err != nil {
		h.fail(w, err)
		return
	}
	defer fsys.Close()
	log := h.cfg.Log.With("env", c.Env, "route", route, "path", abs)
	switch route {
	case envfiles.RouteRead:
		h.read(w, r, fsys, abs)
	case envfiles.RouteStat:
		fi, err := fsys.Stat(abs)
		h.answer(w, fi, err)
	case envfiles.RouteList:
		l, err := fsys.List(abs)
		h.answer(w, l, err)
	case envfiles.RouteMkdir:
		mode, parents, err := modeParents(q, 0o755)
		if err == nil {
			var fi envfiles.FileInfo
			fi, err = fsys.Mkdir(abs, *mode, parents)
			h.answer(w, fi, err)
			return
		}
		h.fail(w, err)
	case envfiles.RouteWrite:
		mode, parents, err := modeParents(q, 0)
		if err != nil {
			h.fail(w, err)
			return
		}
		if !q.Has("mode") {
			mode = nil
		}
		buf := fileBuffers.Get().(*[]byte)
		defer fileBuffers.Put(buf)
		began := time.Now()
		fi, err := fsys.Write(abs, r.Body, mode, parents, *buf)
		if err == nil {
			log.Info("file written", "bytes", fi.Size, "took", time.Since(began).Round(time.Millisecond))
		}
		h.answer(w, fi, err)
	case envfiles.RouteRemove:
		rec, err := boolParam(q, "recursive")
		if err == nil {
			err = fsys.Remove(abs, rec)
		}
		if err != nil {
			h.fail(w, err)
			return
		}
		log.Info("removed", "recursive", rec)
		w.WriteHeader(http.StatusNoContent)
	case envfiles.RouteWatch:
		rec, err := boolParam(q, "recursive")
		if err != nil {
			h.fail(w, err)
			return
		}
		h.watch(w, r, fsys, abs, rec, env.Done)
	}
}

// read sends a file's bytes; Range is honoured. The file is read in
// bounded pieces (or sent by the kernel), never held.
func (h *FilesHandler) read(w http.ResponseWriter, r *http.Request, fsys *envfs.FS, abs string) {
	f, fi, err := fsys.OpenFile(abs)
	if err != nil {
		h.fail(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set(envfiles.ModeHeader, fi.Mode)
	http.ServeContent(w, r, "", fi.Modified, f)
}

// watch streams the folder's changes as lines until the client leaves,
// the folder goes or the environment stops.
func (h *FilesHandler) watch(w http.ResponseWriter, r *http.Request, fsys *envfs.FS, abs string, recursive bool, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	wt, err := fsys.Watch(abs, recursive)
	if err != nil {
		h.fail(w, err)
		return
	}
	defer wt.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	send := func(c envfiles.FileChange) error {
		// A client that stops reading is dropped, not waited for.
		_ = rc.SetWriteDeadline(time.Now().Add(logWriteStall))
		if err := enc.Encode(c); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send(envfiles.FileChange{Op: envfiles.OpWatching, Path: abs}) != nil {
		return
	}
	reason := wt.Run(ctx, send)
	if ctx.Err() != nil {
		select {
		case <-done:
			reason = "the environment stopped"
		default:
			return // the client left
		}
	}
	if reason != "" {
		_ = send(envfiles.FileChange{Op: envfiles.OpEnd, Reason: reason})
	}
}

// authorize checks the ticket, offline, as the logs endpoint does.
func (h *FilesHandler) authorize(r *http.Request) (ticket.Claims, FilesEnv, *envfiles.Error) {
	tk, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tk) == "" {
		return ticket.Claims{}, FilesEnv{}, envfiles.Errorf(envfiles.ReasonTicket, "files take a ticket (POST /v1/environments/{id}/files) as Authorization: Bearer <ticket>")
	}
	id, ok := h.cfg.Identity()
	if !ok {
		return ticket.Claims{}, FilesEnv{}, envfiles.Errorf(envfiles.ReasonBusy, "the node is not registered yet; retry shortly")
	}
	c, err := ticket.Verify(id.Key, strings.TrimSpace(tk), h.cfg.Clock.Now())
	if err != nil {
		return c, FilesEnv{}, envfiles.Errorf(envfiles.ReasonTicket, "%v", err)
	}
	forbid := func(msg string) *envfiles.Error {
		return &envfiles.Error{Message: msg, Code: "forbidden", Reason: envfiles.ReasonTicket, Status: http.StatusForbidden}
	}
	switch {
	case c.Open != ticket.OpenFiles:
		return c, FilesEnv{}, forbid("the ticket does not open files")
	case c.Org != id.Org:
		return c, FilesEnv{}, forbid("the ticket is for another organization")
	case c.Node != id.Node:
		return c, FilesEnv{}, forbid("the ticket is for node " + c.Node + ", not this one")
	}
	env, ok := h.cfg.Env(c.Env)
	if !ok {
		return c, FilesEnv{}, envfiles.Errorf(envfiles.ReasonEnvironmentGone, "environment %s no longer runs on this node", c.Env)
	}
	return c, env, nil
}

func ticketPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

func modeParents(q map[string][]string, def fs.FileMode) (*fs.FileMode, bool, error) {
	mode := def
	if v := first(q["mode"]); v != "" {
		m, err := envfiles.ParseMode(v)
		if err != nil {
			return nil, false, envfiles.Errorf(envfiles.ReasonBadParameter, "%v", err)
		}
		mode = m
	}
	parents, err := boolParam(q, "parents")
	return &mode, parents, err
}

func boolParam(q map[string][]string, k string) (bool, error) {
	v := first(q[k])
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, envfiles.Errorf(envfiles.ReasonBadParameter, "%s must be true or false", k)
	}
	return b, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (h *FilesHandler) answer(w http.ResponseWriter, v any, err error) {
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers err: the endpoint's own errors as they are; any other is
// logged, and answered without its text (it may name the node's paths).
func (h *FilesHandler) fail(w http.ResponseWriter, err error) {
	var e *envfiles.Error
	if !errors.As(err, &e) {
		h.cfg.Log.Warn("files: the request failed", "err", err)
		e = envfiles.Errorf(envfiles.ReasonInternal, "the node could not complete the request (its log says why)")
	}
	if e.Status == 0 {
		e.Status = envfiles.StatusOf(e.Reason)
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e)
}

// filesEnv is a ready environment the agent runs, as the files endpoint
// serves it.
func (a *Agent) filesEnv(id string) (FilesEnv, bool) {
	if _, ok := a.readyTargets(id); !ok {
		return FilesEnv{}, false
	}
	r := a.env(id)
	if r == nil {
		return FilesEnv{}, false
	}
	hp := r.h.Load()
	if hp == nil {
		return FilesEnv{}, false
	}
	f := (*hp).Files()
	home := f.Workdir
	if home == "" {
		home = f.Home
	}
	root := envfs.Root{Dir: f.Root, Home: home, InRoot: f.InRoot, Writable: f.Writable, Tmp: f.Tmp, UID: os.Geteuid(), GID: os.Getegid()}
	if f.Owner != nil && os.Geteuid() == 0 {
		root.UID, root.GID, root.AsUser = f.Owner.UID, f.Owner.GID, true
	}
	for _, n := range f.Reserved {
		root.Hidden = append(root.Hidden, "/"+strings.Trim(n, "/"))
	}
	root.Hidden = append(root.Hidden, f.Mounted...)
	return FilesEnv{Root: root, Done: r.stop, Slots: &r.files}, true
}
