package main

// startAgent runs the reference node agent for the local pools.
func startAgent(d deps) func() { return func() {} }
