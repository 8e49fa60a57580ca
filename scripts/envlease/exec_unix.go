//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/envlease/envlease/shared/execsession"
)

// watchSize carries the terminal's new sizes (SIGWINCH) until stop.
func watchSize(fd int) (<-chan execsession.Size, func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	out := make(chan execsession.Size, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
			}
			if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
				select {
				case out <- execsession.Size{Rows: uint16(h), Cols: uint16(w)}:
				case <-done:
					return
				}
			}
		}
	}()
	return out, func() { signal.Stop(winch); close(done) }
}
