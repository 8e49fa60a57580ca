package lambdatest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Function is a deployed function run locally: a pool of execution
// environments (processes of its bootstrap), each serving one invocation at
// a time, as Lambda scales one.
type Function struct {
	Name string
	Spec Spec
	// Bootstrap is the binary each environment runs.
	Bootstrap string
	// Env is the full environment of the process: the template's variables,
	// resolved, plus what Lambda sets. Credentials are here, never on argv.
	Env []string
	// ARN is the invoked function ARN the runtime is told.
	ARN string
	// Wait bounds how long an invocation may take on this machine beyond
	// the function's timeout (a busy test machine is slower than Lambda).
	Wait time.Duration

	mu    sync.Mutex
	idle  []*instance
	all   []*instance
	count int
}

type instance struct {
	api  *RuntimeAPI
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// LambdaEnv is what Lambda sets in every execution environment of a
// provided.al2023 function besides the function's own variables.
//
// creds are the access key id, secret and session token; Lambda's are always
// temporary, but a local S3 without STS refuses a session token, so an
// empty one is left out.
func LambdaEnv(name string, s Spec, region string, creds [3]string, taskRoot string) []string {
	env := []string{
		"AWS_LAMBDA_FUNCTION_NAME=" + name,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(s.MemoryMB),
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + name,
		"AWS_LAMBDA_LOG_STREAM_NAME=local",
		"AWS_REGION=" + region,
		"AWS_DEFAULT_REGION=" + region,
		"AWS_ACCESS_KEY_ID=" + creds[0],
		"AWS_SECRET_ACCESS_KEY=" + creds[1],
		"_HANDLER=" + s.Handler,
		"LAMBDA_TASK_ROOT=" + taskRoot,
		"LAMBDA_RUNTIME_DIR=" + taskRoot,
		"TZ=:UTC",
		"LANG=en_US.UTF-8",
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + taskRoot,
		// Nothing of the machine's own AWS configuration may leak in.
		"AWS_CONFIG_FILE=" + filepath.Join(taskRoot, "no-aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(taskRoot, "no-aws-credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
	}
	if creds[2] != "" {
		env = append(env, "AWS_SESSION_TOKEN="+creds[2])
	}
	return env
}

// Start starts the first execution environment and waits for its init
// phase: the runtime's first poll. A process that exits or reports an init
// error first fails with its output.
func (f *Function) Start(ctx context.Context) error {
	in, err := f.launch(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.idle = append(f.idle, in)
	f.mu.Unlock()
	return nil
}

func (f *Function) launch(ctx context.Context) (*instance, error) {
	api, err := NewRuntimeAPI()
	if err != nil {
		return nil, err
	}
	// A provided runtime's Lambda runs the package's bootstrap executable,
	// whatever the handler says; the handler only reaches it as _HANDLER.
	if !strings.HasPrefix(f.Spec.Runtime, "provided") || f.Spec.Handler == "" {
		api.Close()
		return nil, fmt.Errorf("function %s: runtime %q handler %q: not a provided runtime with a handler", f.Name, f.Spec.Runtime, f.Spec.Handler)
	}
	bin := f.Bootstrap
	if st, err := os.Stat(bin); err != nil || st.Mode()&0o111 == 0 || filepath.Base(bin) != "bootstrap" {
		api.Close()
		return nil, fmt.Errorf("function %s: no executable bootstrap in its package (%s)", f.Name, bin)
	}
	in := &instance{api: api, out: &syncBuffer{}, done: make(chan struct{})}
	in.cmd = exec.Command(bin)
	in.cmd.Dir = filepath.Dir(bin)
	in.cmd.Env = append(append([]string{}, f.Env...), "AWS_LAMBDA_RUNTIME_API="+api.Addr)
	in.cmd.Stdout, in.cmd.Stderr = in.out, in.out
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := in.cmd.Start(); err != nil {
		api.Close()
		return nil, fmt.Errorf("function %s: start %s: %w", f.Name, bin, err)
	}
	go func() { in.err = in.cmd.Wait(); close(in.done) }()
	f.mu.Lock()
	f.all = append(f.all, in)
	f.mu.Unlock()
	select {
	case <-api.Polled():
		return in, nil
	case fe := <-api.InitError():
		return nil, fmt.Errorf("function %s did not start: %v\n%s", f.Name, fe, in.out.String())
	case <-in.done:
		return nil, fmt.Errorf("function %s did not start: process exited (%v) before asking for an invocation:\n%s", f.Name, in.err, in.out.String())
	case <-ctx.Done():
		return nil, fmt.Errorf("function %s did not start: %w\n%s", f.Name, ctx.Err(), in.out.String())
	}
}

// Invoke runs one invocation on an idle environment, starting a new one if
// all are busy, and returns the response payload or the function's error.
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	f.mu.Lock()
	var in *instance
	if n := len(f.idle); n > 0 {
		in, f.idle = f.idle[n-1], f.idle[:n-1]
	}
	f.count++
	f.mu.Unlock()
	if in == nil {
		var err error
		if in, err = f.launch(ctx); err != nil {
			return nil, err
		}
	}
	id := newRequestID()
	timeout := time.Duration(f.Spec.TimeoutS) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout+f.Wait)
	defer cancel()
	type res struct {
		body []byte
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := in.api.Invoke(ctx, id, f.ARN, payload, time.Now().Add(timeout))
		ch <- res{b, err}
	}()
	select {
	case r := <-ch:
		f.mu.Lock()
		f.idle = append(f.idle, in)
		f.mu.Unlock()
		if r.err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, r.err)
		}
		return r.body, nil
	case <-in.done:
		// A runtime that exits mid-invocation is an environment Lambda
		// throws away; so does this pool.
		return nil, fmt.Errorf("function %s: process exited (%v) during invocation %s:\n%s", f.Name, in.err, id, in.out.String())
	}
}

// Invocations is how many invocations Invoke was given.
func (f *Function) Invocations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

// PeakRSSMB is the largest peak resident set of the environments so far,
// in MiB (Linux only; 0 elsewhere).
func (f *Function) PeakRSSMB() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	peak := 0
	for _, in := range f.all {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", in.cmd.Process.Pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				peak = max(peak, kb/1024)
			}
		}
	}
	return peak
}

// Output is everything the environments wrote (their logs).
func (f *Function) Output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, in := range f.all {
		b.WriteString(in.out.String())
	}
	return b.String()
}

// Stop ends every environment: SIGTERM (Lambda's shutdown), then SIGKILL.
func (f *Function) Stop() {
	f.mu.Lock()
	all := f.all
	f.mu.Unlock()
	for _, in := range all {
		syscall.Kill(-in.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-in.done:
		case <-time.After(2 * time.Second):
			syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
			<-in.done
		}
		in.api.Close()
	}
}

func newRequestID() string {
	b := make([]byte, 16)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
