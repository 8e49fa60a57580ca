//go:build !linux

package envfs

import (
	"context"
	"io"
	"io/fs"
	"os"

	"github.com/envlease/envlease/shared/envfiles"
)

// FS is an environment's root; only Linux nodes serve files (openat2).
type FS struct{}

func errNoFiles() error {
	return envfiles.Errorf(envfiles.ReasonInternal, "only Linux nodes serve an environment's files")
}

func Open(Root) (*FS, error)                         { return nil, errNoFiles() }
func (f *FS) Close() error                           { return nil }
func (f *FS) Stat(string) (envfiles.FileInfo, error) { return envfiles.FileInfo{}, errNoFiles() }
func (f *FS) List(string) (envfiles.FileList, error) { return envfiles.FileList{}, errNoFiles() }
func (f *FS) Remove(string, bool) error              { return errNoFiles() }
func (f *FS) Watch(string, bool) (*Watcher, error)   { return nil, errNoFiles() }
func (f *FS) OpenFile(string) (*os.File, envfiles.FileInfo, error) {
	return nil, envfiles.FileInfo{}, errNoFiles()
}
func (f *FS) Mkdir(string, fs.FileMode, bool) (envfiles.FileInfo, error) {
	return envfiles.FileInfo{}, errNoFiles()
}
func (f *FS) Write(string, io.Reader, *fs.FileMode, bool, []byte) (envfiles.FileInfo, error) {
	return envfiles.FileInfo{}, errNoFiles()
}

// Watcher watches a folder.
type Watcher struct{}

func (w *Watcher) Close() error                                                { return nil }
func (w *Watcher) Run(context.Context, func(envfiles.FileChange) error) string { return "" }
