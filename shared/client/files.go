package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/envfiles"
)

// FilesRequest asks for a ticket for an environment's files.
type FilesRequest struct {
	// Write lets the ticket change files; each write ticket is recorded
	// as an environment.files event.
	Write bool `json:"write"`
	// Path bounds the ticket to it and what is below it ("": all).
	Path string `json:"path,omitempty"`
}

// FilesTicket opens an environment's files on its node until Expires:
// requests go to URL+"/read", "/write", … (docs/files.md).
type FilesTicket struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
	Write   bool      `json:"write"`
	Path    string    `json:"path"`
}

// CreateFilesTicket asks for a ticket for a ready environment's files. A
// write ticket is recorded as an event, so a failed request is not
// retried on its own.
func (c *Client) CreateFilesTicket(ctx context.Context, id string, req FilesRequest) (FilesTicket, error) {
	var out FilesTicket
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(id) + "/files", body: req}, &out)
	return out, err
}

// ticketMargin is how long before its expiry a ticket is replaced: a
// request must start while it is valid.
const ticketMargin = 30 * time.Second

// Files reaches one ready environment's files through its node. It asks
// for tickets as it needs them and keeps each until shortly before it
// expires, so many requests (a folder's copy) cost one ticket, and one
// write event, every few minutes. Safe for concurrent use.
type Files struct {
	c   *Client
	env string
	mu  sync.Mutex
	// tickets are the current read and write tickets.
	tickets [2]*FilesTicket
}

// Files returns the files of environment id.
func (c *Client) Files(id string) *Files { return &Files{c: c, env: id} }

func (f *Files) ticket(ctx context.Context, write bool) (FilesTicket, error) {
	i := 0
	if write {
		i = 1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// A write ticket reads too.
	for j := i; j < 2; j++ {
		if t := f.tickets[j]; t != nil && time.Until(t.Expires) > ticketMargin {
			return *t, nil
		}
	}
	t, err := f.c.CreateFilesTicket(ctx, f.env, FilesRequest{Write: write})
	if err != nil {
		return t, err
	}
	f.tickets[i] = &t
	// Working with its files is using the environment: each new ticket
	// (every few minutes at most) touches it, so a long copy does not let
	// it go idle. A token that may not touch still reaches the files.
	_, _ = f.c.TouchEnvironment(ctx, f.env)
	return t, nil
}

// request sends one request to the node's files endpoint; a non-2xx
// answer is an *envfiles.Error. A ticket the node refuses, or a node that
// no longer holds the environment (it paused and woke on another) or
// cannot be reached, drops the ticket kept, and the request is sent once
// more with a fresh one (which names the environment's node now) when its
// body can be sent again: none, or one that seeks.
func (f *Files) request(ctx context.Context, write bool, method, route string, q url.Values, body io.Reader) (*http.Response, error) {
	var start int64
	again := body == nil || body == http.NoBody
	if sk, ok := body.(io.Seeker); ok && !again {
		if off, err := sk.Seek(0, io.SeekCurrent); err == nil {
			start, again = off, true
		}
	}
	for try := 0; ; try++ {
		t, err := f.ticket(ctx, write)
		if err != nil {
			return nil, err
		}
		res, err := f.send(ctx, t, method, route, q, body)
		if err == nil || ctx.Err() != nil || !staleTicket(err) {
			return res, err
		}
		f.drop(t)
		if try > 0 || !again {
			return nil, err
		}
		if sk, ok := body.(io.Seeker); ok && body != http.NoBody {
			if _, serr := sk.Seek(start, io.SeekStart); serr != nil {
				return nil, err
			}
		}
	}
}

// send sends one request with ticket t.
func (f *Files) send(ctx context.Context, t FilesTicket, method, route string, q url.Values, body io.Reader) (*http.Response, error) {
	if body != nil && body != http.NoBody {
		// The caller owns its reader: a retry may send it again.
		body = io.NopCloser(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.URL+route+"?"+q.Encode(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.Ticket)
	req.Header.Set("User-Agent", f.c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	// A transfer or a watch lasts as long as it lasts: no overall timeout.
	res, err := (&http.Client{Transport: f.c.http.Transport}).Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		return nil, fileError(res)
	}
	return res, nil
}

// staleTicket tells whether err says the ticket kept is no longer good:
// the node refused it, holds the environment no longer, answered for no
// environment at all (401, 403, 404 or 410 without a files reason), or
// could not be reached. A refusal of the request itself (a missing file,
// a path outside the ticket) is not.
func staleTicket(err error) bool {
	var fe *envfiles.Error
	if !errors.As(err, &fe) {
		return true // the node could not be reached, or the connection broke
	}
	switch fe.Reason {
	case envfiles.ReasonTicket, envfiles.ReasonEnvironmentGone:
		return true
	case envfiles.ReasonInternal, "":
		switch fe.Status {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusGone:
			return true
		}
	}
	return fe.Status == http.StatusGone || fe.Status == http.StatusUnauthorized
}

// drop forgets ticket t, if it is still kept, so the next request asks for
// a new one.
func (f *Files) drop(t FilesTicket) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, k := range f.tickets {
		if k != nil && k.Ticket == t.Ticket {
			f.tickets[i] = nil
		}
	}
}

func fileError(res *http.Response) error {
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	e := &envfiles.Error{}
	if json.Unmarshal(raw, e) != nil || e.Message == "" {
		e = &envfiles.Error{Message: fmt.Sprintf("the node's files endpoint answered %s", res.Status), Code: "unavailable", Reason: envfiles.ReasonInternal}
	}
	e.Status = res.StatusCode
	return e
}

func pathQuery(p string, kv ...string) url.Values {
	q := url.Values{"path": {p}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	return q
}

func decodeFile[T any](res *http.Response) (T, error) {
	defer res.Body.Close()
	var v T
	err := json.NewDecoder(res.Body).Decode(&v)
	return v, err
}

// Open reads the file at p: its bytes, streamed from the node as they are
// read, and what it is. Close the reader.
func (f *Files) Open(ctx context.Context, p string) (io.ReadCloser, envfiles.FileInfo, error) {
	res, err := f.request(ctx, false, http.MethodGet, envfiles.RouteRead, pathQuery(p), nil)
	if err != nil {
		return nil, envfiles.FileInfo{}, err
	}
	fi := envfiles.FileInfo{Path: p, Type: envfiles.TypeFile, Size: res.ContentLength, Mode: res.Header.Get(envfiles.ModeHeader)}
	if t, err := http.ParseTime(res.Header.Get("Last-Modified")); err == nil {
		fi.Modified = t.UTC()
	}
	return res.Body, fi, nil
}

// ReadFile reads the file at p whole, refusing one larger than max bytes.
func (f *Files) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	rc, fi, err := f.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if fi.Size > max {
		return nil, &envfiles.Error{Message: fmt.Sprintf("%s has %d bytes, more than the %d asked for", p, fi.Size, max), Code: "too_large", Reason: envfiles.ReasonOutOfDisk, Status: http.StatusRequestEntityTooLarge}
	}
	return io.ReadAll(io.LimitReader(rc, max))
}

// WriteOptions choose how Write writes.
type WriteOptions struct {
	// Mode is the file's permission bits (nil: the replaced file's, else
	// 0644).
	Mode *fs.FileMode
	// Parents makes missing folders.
	Parents bool
}

// Write replaces the file at p with r's bytes, streamed, atomically.
func (f *Files) Write(ctx context.Context, p string, r io.Reader, o WriteOptions) (envfiles.FileInfo, error) {
	mode := ""
	if o.Mode != nil {
		mode = envfiles.FormatMode(*o.Mode)
	}
	if r == nil {
		r = http.NoBody
	}
	res, err := f.request(ctx, true, http.MethodPut, envfiles.RouteWrite, pathQuery(p, "mode", mode, "parents", strconv.FormatBool(o.Parents)), r)
	if err != nil {
		return envfiles.FileInfo{}, err
	}
	return decodeFile[envfiles.FileInfo](res)
}

// Stat describes the entry at p (a link at its end not followed).
func (f *Files) Stat(ctx context.Context, p string) (envfiles.FileInfo, error) {
	res, err := f.request(ctx, false, http.MethodGet, envfiles.RouteStat, pathQuery(p), nil)
	if err != nil {
		return envfiles.FileInfo{}, err
	}
	return decodeFile[envfiles.FileInfo](res)
}

// List lists the folder at p.
func (f *Files) List(ctx context.Context, p string) (envfiles.FileList, error) {
	res, err := f.request(ctx, false, http.MethodGet, envfiles.RouteList, pathQuery(p), nil)
	if err != nil {
		return envfiles.FileList{}, err
	}
	return decodeFile[envfiles.FileList](res)
}

// Mkdir makes the folder p (mode 0 for 0755); with parents, its missing
// parents too, and an existing folder is no error.
func (f *Files) Mkdir(ctx context.Context, p string, mode fs.FileMode, parents bool) (envfiles.FileInfo, error) {
	m := ""
	if mode != 0 {
		m = envfiles.FormatMode(mode)
	}
	res, err := f.request(ctx, true, http.MethodPost, envfiles.RouteMkdir, pathQuery(p, "mode", m, "parents", strconv.FormatBool(parents)), nil)
	if err != nil {
		return envfiles.FileInfo{}, err
	}
	return decodeFile[envfiles.FileInfo](res)
}

// Remove removes the entry at p; with recursive, a folder and all below it.
func (f *Files) Remove(ctx context.Context, p string, recursive bool) error {
	res, err := f.request(ctx, true, http.MethodPost, envfiles.RouteRemove, pathQuery(p, "recursive", strconv.FormatBool(recursive)), nil)
	if err != nil {
		return err
	}
	res.Body.Close()
	return nil
}

// ErrWatchEnded is returned by Watch when the node ended the watch (the
// folder went, the environment stopped); the last change says why.
var ErrWatchEnded = errors.New("the watch ended")

// Watch calls fn with each change of the folder at p (and below it, with
// recursive) until ctx ends, fn returns an error, or the node ends the
// watch (ErrWatchEnded, fn having had the end). The first change is
// OpWatching, once the watch is in place.
func (f *Files) Watch(ctx context.Context, p string, recursive bool, fn func(envfiles.FileChange) error) error {
	res, err := f.request(ctx, false, http.MethodGet, envfiles.RouteWatch, pathQuery(p, "recursive", strconv.FormatBool(recursive)), nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		var c envfiles.FileChange
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("watch: a line that is not a change: %w", err)
		}
		if err := fn(c); err != nil {
			return err
		}
		if c.Op == envfiles.OpEnd {
			return ErrWatchEnded
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
