// Package console is the web console's endpoint group: hand-written HTML, CSS
// and JavaScript modules embedded in the binary and served at / and
// /console/... through the shared HTTP stack. The page is only a browser
// client of /v1/...: it holds no server state and the service gives it no
// more than the API gives any client.
package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

//go:embed files
var files embed.FS

// Options configure the group.
type Options struct {
	// S3Origin is the scheme://host[:port] presigned artifact URLs point at
	// (the bucket's endpoint): the page uploads and downloads there directly,
	// so the Content-Security-Policy must let it connect.
	S3Origin string
}

// file is one embedded file, ready to serve: its content type and validator
// are computed once, and its gzip form too, because API Gateway does not
// compress and the first load should stay small.
type file struct {
	body, gz    []byte
	contentType string
	etag        string
}

// Prefix is where the console's assets are served; the page itself is /.
const Prefix = "/console/"

// Serves reports whether the console answers path: / and everything under
// Prefix. Everything else is the API's.
func Serves(p string) bool {
	return p == "/" || strings.HasPrefix(p, Prefix)
}

// Routes returns the console's routes.
func Routes(opts Options) []httpapi.Route {
	byName := load()
	csp := Policy(opts.S3Origin)
	serve := func(name string) httpapi.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request, _ domain.Principal) error {
			n := name
			if n == "" {
				n = "console/" + r.PathValue("file")
			}
			f, ok := byName[n]
			if !ok {
				return domain.Errorf(domain.CodeNotFound, "no such endpoint: %s", r.URL.Path)
			}
			f.write(w, r, csp)
			return nil
		}
	}
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/{$}", Access: httpapi.Static, Handler: serve("index.html")},
		{Method: http.MethodGet, Path: Prefix + "{file...}", Access: httpapi.Static, Handler: serve("")},
	}
}

// Policy is the Content-Security-Policy of every console response: only the
// console's own files run, nothing inline, no framing, and connections only to
// the API (same origin) and the artifact store.
func Policy(s3Origin string) string {
	connect := "'self'"
	if s3Origin != "" {
		connect += " " + s3Origin
	}
	return strings.Join([]string{
		"default-src 'self'",
		"script-src 'self'",
		"style-src 'self'",
		"img-src 'self' data:",
		"connect-src " + connect,
		"object-src 'none'",
		"frame-ancestors 'none'",
		"base-uri 'none'",
		"form-action 'self'",
	}, "; ")
}

func (f file) write(w http.ResponseWriter, r *http.Request, csp string) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Type", f.contentType)
	// Revalidated on every load: a deploy takes effect at once, and an
	// unchanged file costs a 304.
	h.Set("Cache-Control", "no-cache")
	h.Set("Vary", "Accept-Encoding")
	h.Set("ETag", f.etag)
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := f.body
	if f.gz != nil && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body = f.gz
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func acceptsGzip(v string) bool {
	for _, part := range strings.Split(v, ",") {
		name, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if !ok {
			return true
		}
		f, err := strconv.ParseFloat(q, 64)
		return err == nil && f > 0
	}
	return false
}

func load() map[string]file {
	out := map[string]file{}
	err := fs.WalkDir(files, "files", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		if path.Ext(p) == ".js" {
			ct = "text/javascript; charset=utf-8"
		}
		if ct == "" {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		f := file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		if !strings.HasSuffix(p, ".png") {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, _ = zw.Write(body)
			_ = zw.Close()
			if buf.Len() < len(body) {
				f.gz = buf.Bytes()
			}
		}
		out[strings.TrimPrefix(p, "files/")] = f
		return nil
	})
	if err != nil {
		// The files are part of the binary: a failure here is a build bug.
		panic("console: read embedded files: " + err.Error())
	}
	return out
}
