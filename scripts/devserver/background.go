package main

// startBackground starts what runs beside the API — the scheduled jobs every
// -sweep, and the node agent for the local pools — and returns a function
// that stops them and waits for them to finish.
func startBackground(d deps) func() {
	stopJobs := startJobs(d)
	stopReoffers := startReoffers(d)
	stopAgent := startAgent(d)
	return func() {
		stopAgent()
		stopReoffers()
		stopJobs()
	}
}
