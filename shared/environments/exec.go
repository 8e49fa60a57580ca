package environments

import (
	"context"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// Limits of an exec request.
const (
	// ExecTicketTTL is the life of an exec ticket: it is used at once,
	// and checked only when the command starts (a command runs on past it).
	ExecTicketTTL = time.Minute
	// MaxExecArgs and MaxExecBytes bound the command of an exec.
	MaxExecArgs  = 4096
	MaxExecBytes = 256 << 10
	// maxEventWord bounds the command's first word in the event.
	maxEventWord = 256
)

// ExecRequest is the body of POST /v1/environments/{id}/exec.
type ExecRequest struct {
	// Command is the argv to run inside the environment.
	Command []string `json:"command"`
	// TTY asks for a pseudo-terminal (envlease shell, exec -t).
	TTY bool `json:"tty"`
}

// Exec is the answer: where the node serves exec sessions, and a ticket
// that runs the request's command there (and no other) until it expires.
type Exec struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
}

// Exec issues a ticket that runs req.Command inside a ready environment of
// the caller's organization, after writing its environment.exec event
// (who, and the command's first word: never its arguments, which may hold
// secrets). No event, no ticket: every exec is on record. It costs the
// environment's read, the node's, the template's (cached) and the event's
// write.
func (s *Service) Exec(ctx context.Context, p domain.Principal, id string, req ExecRequest) (Exec, error) {
	if err := validExec(req); err != nil {
		return Exec{}, err
	}
	e, n, err := s.insideReady(ctx, p, id, "a command runs in it")
	if err != nil {
		return Exec{}, err
	}
	now := s.clock.Now()
	exp := now.Add(ExecTicketTTL).Truncate(time.Second).UTC()
	tk, err := ticket.Sign(n.TunnelKey, ticket.Claims{Org: p.OrgID, Env: e.ID, Node: n.ID, Exp: exp.Unix(),
		Open: ticket.OpenExec, Command: ticket.CommandDigest(req.Command)})
	if err != nil {
		return Exec{}, domain.Internal(err)
	}
	ev := domain.NewEvent(ctx, domain.EventEnvExec, p.OrgID, domain.Subject{Kind: "environment", ID: e.ID}, now,
		map[string]any{"command": firstWord(req.Command), "tty": req.TTY, "node": n.ID})
	if err := s.store.PutEvent(ctx, ev); err != nil {
		return Exec{}, err
	}
	return Exec{URL: n.TunnelURL, Ticket: tk, Expires: exp}, nil
}

// insideReady finds a ready environment of the caller's organization that
// may be entered (its template does not turn exec off: exec and files
// reach the same things) and the active node that runs it, with an
// endpoint. what says what waits for ready, in the conflict's message.
func (s *Service) insideReady(ctx context.Context, p domain.Principal, id, what string) (domain.Environment, domain.Node, error) {
	var n domain.Node
	// A paused environment wakes for the command or the files (pause.go).
	e, err := s.getWoken(ctx, p, id)
	if err != nil {
		return e, n, err
	}
	switch {
	case e.State == domain.StatePending || e.State == domain.StateStarting:
		return e, n, domain.Errorf(domain.CodeConflict, "environment %s is %s: %s once it is ready; wait for it and ask again", e.ID, e.State, what)
	case e.State != domain.StateReady || e.Node == "":
		return e, n, domain.Errorf(domain.CodeConflict, "environment %s is %s: it no longer runs, so nothing can reach inside it", e.ID, e.State)
	}
	t, err := s.template(ctx, p.OrgID, e.Template, s.clock.Now())
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return e, n, err
	}
	// A template removed since the lease says nothing any more: its
	// environments keep the default.
	if err == nil && !t.ExecAllowed() {
		return e, n, domain.Errorf(domain.CodeExecDisabled, "template %s turns exec off (exec: false): no command, shell or file access reaches inside its environments", e.Template)
	}
	n, err = s.store.GetNode(ctx, p.OrgID, e.Node)
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return e, n, err
	}
	if err != nil || n.State != domain.NodeActive {
		return e, n, domain.Errorf(domain.CodeConflict, "the node that runs environment %s is no longer active; the environment is about to fail", e.ID)
	}
	if n.TunnelURL == "" || len(n.TunnelKey) == 0 {
		return e, n, domain.Errorf(domain.CodeConflict, "node %s, which runs environment %s, has no endpoint for commands or files: its agent registered without one (started with -no-tunnel)", n.ID, e.ID)
	}
	return e, n, nil
}

func validExec(req ExecRequest) error {
	if len(req.Command) == 0 || req.Command[0] == "" {
		return domain.Invalid("command", "command must name a program to run: [\"sh\", \"-c\", \"...\"]")
	}
	if len(req.Command) > MaxExecArgs {
		return domain.Invalid("command", "a command has at most %d arguments, this one %d", MaxExecArgs, len(req.Command))
	}
	n := 0
	for _, a := range req.Command {
		n += len(a) + 1
		if !utf8.ValidString(a) {
			return domain.Invalid("command", "a command's arguments must be UTF-8")
		}
		for i := 0; i < len(a); i++ {
			if a[i] == 0 {
				return domain.Invalid("command", "a command's arguments cannot hold NUL bytes")
			}
		}
	}
	if n > MaxExecBytes {
		return domain.Invalid("command", "a command has at most %d bytes of arguments, this one %d", MaxExecBytes, n)
	}
	return nil
}

// firstWord is what the event keeps of a command: its program, cut to a
// bound, never an argument.
func firstWord(argv []string) string {
	w := argv[0]
	if len(w) > maxEventWord {
		w = w[:maxEventWord]
		for !utf8.ValidString(w) {
			w = w[:len(w)-1]
		}
	}
	return w
}

func (s *Service) handleExec(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req ExecRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	x, err := s.Exec(r.Context(), p, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	// The ticket runs the command for whoever holds it until it expires.
	httpapi.WriteSecret(w, http.StatusOK, x)
	return nil
}
