package environments

import (
	"context"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// FilesTicketTTL is the life of a files ticket: the node checks it when
// each request starts (an upload or a watch goes on past it), and clients
// ask again when it is about to end.
const FilesTicketTTL = 5 * time.Minute

// maxFilesPath bounds the path a files ticket names.
const maxFilesPath = 4096

// FilesHeir is what a files ticket inherits from the token that asked
// for it: it acts for 5 minutes, so never past that token's expiry, and
// with the exec scope it needs.
var FilesHeir = auth.Heir{What: "a files ticket", ActsWith: []string{domain.ScopeEnvExec}, RestrictionsChecked: true}

// FilesRequest is the body of POST /v1/environments/{id}/files.
type FilesRequest struct {
	// Write lets the ticket change files (write, mkdir, remove).
	Write bool `json:"write"`
	// Path is what the ticket opens, and everything below it: absolute,
	// or relative to the environment's working folder ("" and "/": all).
	Path string `json:"path"`
}

// Files is the answer: the node's files endpoint and a ticket for it.
type Files struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
	Write   bool      `json:"write"`
	Path    string    `json:"path"`
}

// Files issues a ticket for the files of a ready environment of the
// caller's organization (docs/files.md). A write ticket is recorded first
// as an environment.files event: no event, no ticket, so every write is on
// record, coalesced per ticket. It costs what an exec ticket does.
func (s *Service) Files(ctx context.Context, p domain.Principal, id string, req FilesRequest) (Files, error) {
	at, err := filesPath(req.Path)
	if err != nil {
		return Files{}, err
	}
	e, n, err := s.insideReady(ctx, p, id, "its files are reached")
	if err != nil {
		return Files{}, err
	}
	now := s.clock.Now()
	exp := now.Add(FilesTicketTTL)
	lim, err := auth.Inherit(p, FilesHeir, auth.Limits{Expires: &exp})
	if err != nil {
		return Files{}, err
	}
	exp = lim.Expires.Truncate(time.Second).UTC()
	tk, err := ticket.Sign(n.TunnelKey, ticket.Claims{Org: p.OrgID, Env: e.ID, Node: n.ID, Exp: exp.Unix(),
		Open: ticket.OpenFiles, Path: at, Write: req.Write})
	if err != nil {
		return Files{}, domain.Internal(err)
	}
	if req.Write {
		ev := domain.NewEvent(ctx, domain.EventEnvFiles, p.OrgID, domain.Subject{Kind: "environment", ID: e.ID}, now,
			map[string]any{"path": at, "write": true, "node": n.ID})
		if err := s.store.PutEvent(ctx, ev); err != nil {
			return Files{}, err
		}
	}
	return Files{URL: tunnel.FilesURL(n.TunnelURL), Ticket: tk, Expires: exp, Write: req.Write, Path: at}, nil
}

// filesPath checks a ticket's path and returns it as the ticket names it:
// cleaned, "/" for everything, a relative one kept relative (the node
// knows the working folder it is relative to).
func filesPath(p string) (string, error) {
	if p == "" || p == "/" {
		return "/", nil
	}
	switch {
	case len(p) > maxFilesPath:
		return "", domain.Invalid("path", "a path has at most %d bytes", maxFilesPath)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return "", domain.Invalid("path", "a path must be UTF-8 without NUL bytes")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", domain.Invalid("path", "a path cannot hold ..: name what is inside the environment")
		}
	}
	c := path.Clean(p)
	return c, nil
}

func (s *Service) handleFiles(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req FilesRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	f, err := s.Files(r.Context(), p, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	// The ticket opens the files for whoever holds it until it expires.
	httpapi.WriteSecret(w, http.StatusOK, f)
	return nil
}
