package runc

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/agent/capped"
)

// outputs are a container's stdout and stderr: pipes it writes to, copied
// to capped files of its folder and to the writers the caller gave.
type outputs struct {
	w     [2]*os.File // the container's ends
	r     [2]*os.File
	files [2]*capped.File
	done  chan struct{}
}

func newOutputs(dir string, max int64, stdout, stderr io.Writer) (_ *outputs, err error) {
	o := &outputs{done: make(chan struct{})}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	extra := [2]io.Writer{stdout, stderr}
	var copies sync.WaitGroup
	for i, name := range []string{"stdout.log", "stderr.log"} {
		if o.r[i], o.w[i], err = os.Pipe(); err != nil {
			return nil, err
		}
		if o.files[i], err = capped.New(max, capped.OpenPath(filepath.Join(dir, name))); err != nil {
			return nil, err
		}
		w := io.Writer(o.files[i])
		if extra[i] != nil {
			w = io.MultiWriter(o.files[i], extra[i])
		}
		copies.Add(1)
		go func(r io.Reader) {
			defer copies.Done()
			_, _ = io.Copy(w, r)
		}(o.r[i])
	}
	go func() { copies.Wait(); close(o.done) }()
	return o, nil
}

// started closes the runtime's copies of the container's ends, once runc
// create handed them on: the pipes then end with the container's processes.
func (o *outputs) started() {
	for _, w := range o.w {
		if w != nil {
			w.Close()
		}
	}
}

// wait waits up to d for the copies to reach the pipes' end, then closes
// the pipes and the files.
func (o *outputs) wait(d time.Duration) {
	select {
	case <-o.done:
	case <-time.After(d):
	}
	o.close()
	<-o.done
	for _, f := range o.files {
		if f != nil {
			f.Close()
		}
	}
}

func (o *outputs) close() {
	for _, f := range append(o.r[:], o.w[:]...) {
		if f != nil {
			f.Close()
		}
	}
}
