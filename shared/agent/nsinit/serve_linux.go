//go:build linux

package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The init runs commands for the agent (envlease exec): it is already in
// every namespace and the cgroup of the environment, so it starts them as
// it started the template's command (spawn), a child of its own, with no
// program in between. The agent asks through a socket pair made with the
// init (SOCK_SEQPACKET, one message a request): a request is the command's
// Config, with four descriptors passed along (SCM_RIGHTS): a socket of the
// exec's own and the command's stdin, stdout and stderr (a terminal's
// slave for all three). On the exec's socket the init answers once the
// command runs (a report, as the init's own), takes signals for it
// ({"signal":N}) and sends its wait status once it has reaped it; the
// socket ends then, or when the init ends (every process of the
// environment with it).

// ctlFd is the init's end of the agent's socket.
const ctlFd = 5

// Most a request may hold: a command's configuration is its arguments and
// environment. The socket's send buffer (net.core.wmem_default, about
// 200 KiB) bounds one message first: a larger one is refused to the agent
// ("message too long").
const maxRequest = 256 << 10

// execRequest is one command the agent asks the init to run.
type execRequest struct {
	cfg   Config
	conn  *net.UnixConn
	files []int
}

// signalRequest is what the agent sends on an exec's socket.
type signalRequest struct {
	Signal int `json:"signal"`
}

// execTable holds the commands the init runs for the agent, by pid, until
// it has reaped them. Its lock is held around each reap, so a signal is
// never sent to a pid already reaped (and perhaps reused).
type execTable struct {
	mu sync.Mutex
	m  map[int]*net.UnixConn
}

// listenExecs passes the agent's requests to the init's main loop until
// the agent's end closes.
func listenExecs(ctl *net.UnixConn, reqs chan<- execRequest) {
	defer ctl.Close()
	buf := make([]byte, maxRequest)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := ctl.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		if n == 0 && oobn == 0 {
			return // the agent's end closed
		}
		var fds []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if got, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, got...)
				}
			}
		}
		if len(fds) != 4 {
			closeAll(fds)
			continue // no socket to answer on
		}
		f := os.NewFile(uintptr(fds[0]), "exec")
		c, err := net.FileConn(f)
		f.Close()
		conn, ok := c.(*net.UnixConn)
		if err != nil || !ok {
			closeAll(fds[1:])
			continue
		}
		req := execRequest{conn: conn, files: fds[1:]}
		switch err := json.Unmarshal(buf[:n], &req.cfg); {
		case flags&unix.MSG_TRUNC != 0:
			reply(conn, report{Error: "exec: the command's arguments and environment are too large"})
		case err != nil:
			reply(conn, report{Error: fmt.Sprintf("exec: read the command's configuration: %v", err)})
		default:
			reqs <- req
			continue
		}
		conn.Close()
		closeAll(req.files)
	}
}

// runExec starts one requested command (on the init's main thread, as
// spawn requires) and answers.
func (t *execTable) runExec(req execRequest) {
	files := make([]uintptr, len(req.files))
	for i, fd := range req.files {
		files[i] = uintptr(fd)
	}
	pid, warns, ended, err := spawn(req.cfg, files)
	closeAll(req.files)
	if err != nil {
		reply(req.conn, report{Error: err.Error()})
		req.conn.Close()
		return
	}
	if ended != nil {
		// Reaped already: its pid may be another process's by now, so no
		// signal is ever sent to it.
		reply(req.conn, report{Started: true, Warnings: warns})
		status := uint32(*ended)
		reply(req.conn, report{Status: &status})
		req.conn.Close()
		return
	}
	t.mu.Lock()
	t.m[pid] = req.conn
	t.mu.Unlock()
	reply(req.conn, report{Started: true, Warnings: warns})
	go t.signals(pid, req.conn)
}

// signals passes the agent's signals on to the command pid until its
// socket ends.
func (t *execTable) signals(pid int, conn *net.UnixConn) {
	buf := make([]byte, 256)
	for {
		n, err := conn.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var r signalRequest
		if json.Unmarshal(buf[:n], &r) != nil || r.Signal <= 0 {
			continue
		}
		t.mu.Lock()
		if t.m[pid] == conn {
			_ = unix.Kill(pid, syscall.Signal(r.Signal))
		}
		t.mu.Unlock()
	}
}

// reap reaps one child that ended, if any, and tells the agent how if it
// was a command it asked for.
func (t *execTable) reap() (int, unix.WaitStatus, error) {
	var ws unix.WaitStatus
	t.mu.Lock()
	pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
	var conn *net.UnixConn
	if err == nil && pid > 0 {
		conn = t.m[pid]
		delete(t.m, pid)
	}
	t.mu.Unlock()
	if conn != nil {
		status := uint32(ws)
		reply(conn, report{Status: &status})
		conn.Close()
	}
	return pid, ws, err
}

func reply(conn *net.UnixConn, r report) {
	b, _ := json.Marshal(r)
	_, _ = conn.Write(b)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Proc is a command the init runs for the agent (Cmd.Exec).
type Proc struct {
	conn   *net.UnixConn
	once   sync.Once
	status syscall.WaitStatus
}

// Exec runs cfg's command inside the running environment, as a child of
// its init (in its namespaces and cgroup), with stdin, stdout and stderr
// as its descriptors 0, 1 and 2, under cfg's limits, CPUs and user as the
// template's command runs. It returns once the command runs, with what
// could not be applied, or why it did not start. The caller closes its
// copies of the files.
func (c *Cmd) Exec(cfg Config, stdin, stdout, stderr *os.File) (*Proc, []string, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("exec: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "exec")
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("exec: %w", err)
	}
	conn := fc.(*net.UnixConn)
	b, err := json.Marshal(cfg)
	if err == nil {
		rights := unix.UnixRights(fds[1], int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
		_, _, err = c.ctl.WriteMsgUnix(b, rights, nil)
	}
	unix.Close(fds[1])
	if err != nil {
		conn.Close()
		if errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, errors.New("exec: the environment's init has ended")
		}
		return nil, nil, fmt.Errorf("exec: ask the environment's init: %w", err)
	}
	var r report
	if err := readReport(conn, &r); err != nil {
		conn.Close()
		return nil, nil, errors.New("the command did not start: the environment's init has ended")
	}
	if r.Error != "" {
		conn.Close()
		return nil, nil, errors.New(r.Error)
	}
	return &Proc{conn: conn}, r.Warnings, nil
}

func readReport(conn *net.UnixConn, r *report) error {
	buf := make([]byte, 64<<10)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("no report")
	}
	*r = report{}
	return json.Unmarshal(buf[:n], r)
}

// Wait waits until the command has ended and returns its wait status. When
// the init ends first, every process of the environment was killed with
// it: the status is then a SIGKILL's.
func (p *Proc) Wait() syscall.WaitStatus {
	p.once.Do(func() {
		defer p.conn.Close()
		p.status = syscall.WaitStatus(syscall.SIGKILL)
		for {
			var r report
			if err := readReport(p.conn, &r); err != nil {
				return
			}
			if r.Status != nil {
				p.status = syscall.WaitStatus(*r.Status)
				return
			}
		}
	})
	return p.status
}

// Signal sends sig to the command, until it has ended.
func (p *Proc) Signal(sig syscall.Signal) error {
	b, _ := json.Marshal(signalRequest{Signal: int(sig)})
	if _, err := p.conn.Write(b); err != nil {
		return os.ErrProcessDone
	}
	return nil
}
