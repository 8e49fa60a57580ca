package devstack

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// DefaultBucket is the bucket StartS3 creates when S3Options.Bucket is empty.
const DefaultBucket = "envlease"

const (
	// startTimeout bounds how long a started gateway may take to answer
	// HTTP. It normally answers within a fraction of a second.
	startTimeout = 30 * time.Second
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// outputTail is how much of the gateway's output is kept for error
	// messages.
	outputTail = 8 << 10
)

// S3Options configures StartS3. The zero value is usable.
type S3Options struct {
	// Dir is the gateway's data directory. Empty means a fresh temporary
	// directory that Stop removes; a given directory is kept, so a dev server
	// can keep its objects across restarts. It must be on a filesystem with
	// user extended attributes (versitygw keeps object metadata, including
	// checksums, in xattrs).
	Dir string
	// Bucket is created at start (kept if it already exists in Dir).
	// Empty means DefaultBucket.
	Bucket string
	// AccessKey and SecretKey are the gateway's root credentials. Empty
	// means random ones, so no other local user can guess them.
	AccessKey string
	SecretKey string
	// Addr is the listen address, which must be a loopback IP and port
	// (e.g. 127.0.0.1:9000). Empty means a free port on 127.0.0.1.
	Addr string
	// Progress receives a line when versitygw has to be built first (which
	// takes a minute or two). Nil discards.
	Progress io.Writer
	// Output receives the gateway's own stdout and stderr. Nil discards;
	// the last few KiB are kept either way for error messages.
	Output io.Writer
}

// S3 is a running versitygw gateway with a posix backend.
type S3 struct {
	// Endpoint is the base URL, e.g. http://127.0.0.1:40124.
	Endpoint  string
	AccessKey string
	SecretKey string
	Bucket    string
	// Dir is the data directory; objects of Bucket are files under
	// Dir/Bucket.
	Dir string

	cmd       *exec.Cmd
	done      chan struct{} // closed once the process has been reaped
	waitErr   error         // set before done is closed
	out       *tailBuffer
	removeDir bool
	stopOnce  sync.Once
}

// StartS3 builds versitygw if needed (see VersityGWBinary), starts it as a
// child process listening on loopback, waits until it answers HTTP and
// creates the bucket. Stop must be called to end it.
func StartS3(ctx context.Context, opts S3Options) (*S3, error) {
	bin, err := VersityGWBinary(ctx, opts.Progress)
	if err != nil {
		return nil, err
	}
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	if opts.AccessKey == "" {
		opts.AccessKey = "local-" + strings.ToLower(rand.Text()[:12])
	}
	if opts.SecretKey == "" {
		opts.SecretKey = rand.Text()
	}
	if opts.Addr != "" {
		if err := checkLoopback(opts.Addr); err != nil {
			return nil, err
		}
	}

	dir, removeDir := opts.Dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "envlease-s3-*"); err != nil {
			return nil, fmt.Errorf("devstack: create s3 data dir: %w", err)
		}
		removeDir = true
	} else {
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, fmt.Errorf("devstack: s3 data dir: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("devstack: create s3 data dir: %w", err)
		}
	}

	// A free port is found by binding :0 and closing, so another process can
	// take it before the gateway binds it. That is rare; try a few ports
	// before giving up. A fixed Addr gets one attempt.
	attempts := 3
	if opts.Addr != "" {
		attempts = 1
	}
	var s *S3
	for i := 0; i < attempts; i++ {
		addr := opts.Addr
		if addr == "" {
			if addr, err = freeLoopbackAddr(); err != nil {
				break
			}
		}
		s, err = launch(ctx, bin, addr, dir, opts)
		if err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		if removeDir {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	s.removeDir = removeDir

	if err := s.createBucket(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

var errAddrInUse = errors.New("address already in use")

// launch starts one gateway process on addr and waits for it to answer.
func launch(ctx context.Context, bin, addr, dir string, opts S3Options) (*S3, error) {
	// Every flag that could reach the network (webui, admin port, website,
	// event and log webhooks, metrics, external IAM) is off by default in
	// v1.8.0, and each of them can also be switched on by an environment
	// variable (VGW_*, WEBHOOK, LOGFILE...). So the flags below and the two
	// credentials are the whole configuration and the environment is not
	// inherited. The credentials go in the environment (versitygw reads
	// --access and --secret from ROOT_ACCESS_KEY_ID and
	// ROOT_SECRET_ACCESS_KEY), never the arguments: every user of the machine
	// can read a process's arguments (ps, /proc/<pid>/cmdline), while its
	// environment is readable only by its own user and root.
	cmd := exec.Command(bin,
		"--region", Region,
		"--port", addr, // replaces the default ":7070", which is every interface
		"--quiet", // no per-request log lines
		"posix", dir,
	)
	cmd.Env = append(childEnv(), "ROOT_ACCESS_KEY_ID="+opts.AccessKey, "ROOT_SECRET_ACCESS_KEY="+opts.SecretKey)
	cmd.SysProcAttr = childSysProcAttr()
	out := newTailBuffer(outputTail)
	var w io.Writer = out
	if opts.Output != nil {
		w = io.MultiWriter(out, opts.Output)
	}
	cmd.Stdout = w
	cmd.Stderr = w
	// The output pipes close when the process exits; WaitDelay only guards
	// against a grandchild keeping them open.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devstack: start versitygw: %w", err)
	}
	s := &S3{
		Endpoint:  "http://" + addr,
		AccessKey: opts.AccessKey,
		SecretKey: opts.SecretKey,
		Bucket:    opts.Bucket,
		Dir:       dir,
		cmd:       cmd,
		done:      make(chan struct{}),
		out:       out,
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx, addr); err != nil {
		s.Stop()
		if errors.Is(err, errAddrInUse) {
			return nil, err
		}
		if strings.Contains(out.String(), "address already in use") {
			return nil, fmt.Errorf("devstack: versitygw could not bind %s: %w; its output:\n%s", addr, errAddrInUse, out.String())
		}
		return nil, err
	}
	return s, nil
}

// waitReady polls until the gateway answers any HTTP request on addr, the
// process exits, ctx ends or startTimeout passes.
func (s *S3) waitReady(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	probe := &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return fmt.Errorf("devstack: versitygw exited during start (%v); its output:\n%s", s.waitErr, s.out.String())
		case <-ctx.Done():
			return fmt.Errorf("devstack: versitygw did not answer on %s: %w; its output:\n%s", addr, ctx.Err(), s.out.String())
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			return fmt.Errorf("devstack: readiness probe: %w", err)
		}
		resp, err := probe.Do(req)
		if err != nil {
			continue
		}
		// Unsigned, so the answer is an S3 AccessDenied; any answer means
		// something listens.
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		select {
		case <-s.done:
			continue
		default:
		}
		// The port was found free, and another program may have taken it
		// before the gateway could: then the answer was that program's,
		// and the gateway, still starting, fails to bind. Only a listener
		// the gateway holds is the gateway.
		if !listensOn(s.cmd.Process.Pid, port) {
			return fmt.Errorf("devstack: another program answers on %s: %w", addr, errAddrInUse)
		}
		return nil
	}
}

func (s *S3) createBucket(ctx context.Context) error {
	_, err := s.Client(ctx).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("devstack: create bucket %q on versitygw: %w; its output:\n%s", s.Bucket, err, s.out.String())
	}
	return nil
}

// Client returns an S3 client for this gateway with path-style addressing
// (the gateway has no virtual-host DNS). Like Dynamo.Client it is built
// without reading the host's AWS configuration; building it does no I/O.
func (s *S3) Client(ctx context.Context) *s3.Client {
	_ = ctx
	return s3.NewFromConfig(localConfig(s.AccessKey, s.SecretKey), func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint)
		o.UsePathStyle = true
	})
}

// Stop ends the gateway: SIGTERM to its process group, SIGKILL if it has not
// exited within a few seconds, then it waits for the process to be reaped and
// removes the data directory if StartS3 created it. It is safe to call more
// than once.
func (s *S3) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	s.stopOnce.Do(func() {
		stopGroup(s.cmd.Process.Pid, s.done)
		if s.removeDir {
			_ = os.RemoveAll(s.Dir)
		}
	})
}

// stopGroup ends the process group of a child started with childSysProcAttr
// (Setpgid makes the child its group's leader): SIGTERM, then SIGKILL if it
// has not exited within stopGrace; done is closed once it has been reaped.
func stopGroup(pgid int, done <-chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
}

// Output returns the last few KiB the gateway wrote to stdout and stderr.
func (s *S3) Output() string { return s.out.String() }

// checkLoopback rejects listen addresses that are not a loopback IP and port,
// so a configuration mistake cannot expose the gateway on the network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("devstack: s3 listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("devstack: s3 listen address %q is not a loopback IP", addr)
	}
	return nil
}

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("devstack: find a free loopback port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("devstack: find a free loopback port: %w", err)
	}
	return addr, nil
}

// childEnv is the whole environment of the gateway: just enough for a
// process to run, none of the VGW_* or other variables that configure it.
func childEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// tailBuffer is an io.Writer that keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tail(t.buf, t.max)
}
