package main

import (
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/envlease/envlease/shared/client"
)

// progress returns a progress bar on standard error when it is a terminal,
// and nil (no output at all) when it is piped or redirected, so logs and
// scripts never get a stream of carriage returns. finish ends the bar's line;
// calling it again does nothing.
func (a *app) progress(desc string, total int64) (p client.Progress, finish func()) {
	if !isTerminal(a.stderr) {
		return nil, func() {}
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(a.stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(true),
		// No colour codes: plain output needs no NO_COLOR handling.
		progressbar.OptionEnableColorCodes(false),
		progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(a.stderr, "\n") }),
	)
	var once sync.Once
	return func(done, total int64) {
			if total >= 0 && bar.GetMax64() != total {
				bar.ChangeMax64(total)
			}
			_ = bar.Set64(done)
		}, func() {
			once.Do(func() { _ = bar.Finish() })
		}
}
