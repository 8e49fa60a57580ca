package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// timingsVar names the environment variable that makes envlease write when
// each step of its run happened, for benchmarks: a file to write the JSON
// to, or "-" for one JSON line on standard error. It is not a flag: it is
// for measuring, not for people.
const timingsVar = "ENVLEASE_TIMINGS"

// processStart is as near to the process's start as Go code gets: package
// variables are set before main runs.
var processStart = time.Now()

// stepTimes records the instants of the steps of a run, in order.
type stepTimes struct {
	mu    sync.Mutex
	steps []stepTime
}

// stepTime is a step's end, in Unix nanoseconds so it can be compared
// with instants taken by other processes on the same machine.
type stepTime struct {
	Step string `json:"step"`
	At   int64  `json:"at"`
}

// steps is the run's record; marks are kept only when timingsVar is set.
var steps = &stepTimes{}

// markStep records that step ended now.
func markStep(step string) {
	steps.mu.Lock()
	steps.steps = append(steps.steps, stepTime{Step: step, At: time.Now().UnixNano()})
	steps.mu.Unlock()
}

// writeTimings writes the record where getenv(timingsVar) says, if anywhere.
func writeTimings(getenv func(string) string, stderr io.Writer) {
	dest := getenv(timingsVar)
	if dest == "" {
		return
	}
	markStep("exit")
	steps.mu.Lock()
	b, err := json.Marshal(struct {
		Start int64      `json:"start"`
		Steps []stepTime `json:"steps"`
	}{processStart.UnixNano(), steps.steps})
	steps.mu.Unlock()
	if err != nil {
		return
	}
	if dest == "-" {
		fmt.Fprintf(stderr, "%s\n", b)
		return
	}
	if err := os.WriteFile(dest, append(b, '\n'), 0o600); err != nil {
		fmt.Fprintf(stderr, "envlease: %s: %v\n", timingsVar, err)
	}
}
