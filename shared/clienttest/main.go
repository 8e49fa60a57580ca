package clienttest

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
)

// Main runs a package's tests and examples (m.Run) with one stack started
// before them and stopped after them, for TestMain: examples have no
// *testing.T to start a stack with. started is given the stack before
// anything runs. It returns the exit code for os.Exit; a stack that does not
// start, or an API answer that breaks the API description while the tests
// run, fails the run.
func Main(m *testing.M, started func(*Stack), opts ...Option) int {
	t := &mainTB{ctx: context.Background()}
	code := t.run(func() int {
		s := Start(t, opts...)
		started(s)
		return m.Run()
	})
	t.cleanup()
	if t.Failed() && code == 0 {
		code = 1
	}
	return code
}

// mainTB is the testing.TB of a stack that serves a whole test binary: a
// failure is written to standard error and fails the run. FailNow ends the
// run only on the goroutine that runs it (Start's); elsewhere it panics, as
// it may only be called there.
type mainTB struct {
	// TB is nil: it only carries the interface's unexported method, and
	// every method is defined below.
	testing.TB
	ctx context.Context

	mu       sync.Mutex
	failed   bool
	cleanups []func()
	tempDirs []string
}

// failNow is what FailNow panics with, for run to recover.
type failNow struct{}

func (t *mainTB) run(f func() int) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(failNow); !ok {
				panic(r)
			}
			code = 1
		}
	}()
	return f()
}

func (t *mainTB) cleanup() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, d := range t.tempDirs {
		_ = os.RemoveAll(d)
	}
}

func (t *mainTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *mainTB) Log(args ...any)                 { fmt.Fprintln(os.Stderr, append([]any{"clienttest:"}, args...)...) }
func (t *mainTB) Logf(format string, args ...any) { t.Log(fmt.Sprintf(format, args...)) }
func (t *mainTB) Error(args ...any)               { t.Log(args...); t.Fail() }
func (t *mainTB) Errorf(format string, args ...any) {
	t.Logf(format, args...)
	t.Fail()
}
func (t *mainTB) Fatal(args ...any)                 { t.Log(args...); t.FailNow() }
func (t *mainTB) Fatalf(format string, args ...any) { t.Logf(format, args...); t.FailNow() }
func (t *mainTB) Skip(args ...any)                  { t.Fatal(append([]any{"skipped:"}, args...)...) }
func (t *mainTB) Skipf(format string, args ...any)  { t.Fatalf("skipped: "+format, args...) }
func (t *mainTB) SkipNow()                          { t.Fatal("skipped") }
func (t *mainTB) Skipped() bool                     { return false }
func (t *mainTB) Helper()                           {}
func (t *mainTB) Name() string                      { return "TestMain" }
func (t *mainTB) Context() context.Context          { return t.ctx }
func (t *mainTB) Output() io.Writer                 { return os.Stderr }
func (t *mainTB) Attr(key, value string)            {}
func (t *mainTB) ArtifactDir() string               { return t.TempDir() }

func (t *mainTB) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}

func (t *mainTB) FailNow() {
	t.Fail()
	panic(failNow{})
}

func (t *mainTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *mainTB) TempDir() string {
	d, err := os.MkdirTemp("", "clienttest-")
	if err != nil {
		t.Fatalf("temporary directory: %v", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tempDirs = append(t.tempDirs, d)
	return d
}

// Setenv and Chdir change the whole process, for every test of the binary,
// so a stack serving them all refuses both.
func (t *mainTB) Setenv(key, value string) {
	t.Fatalf("Setenv(%q) in a stack shared by every test", key)
}
func (t *mainTB) Chdir(dir string) { t.Fatalf("Chdir(%q) in a stack shared by every test", dir) }
