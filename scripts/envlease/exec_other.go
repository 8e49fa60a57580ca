//go:build !unix

package main

import "github.com/envlease/envlease/shared/execsession"

// watchSize: without SIGWINCH the size stays the one the command started with.
func watchSize(int) (<-chan execsession.Size, func()) { return nil, func() {} }
