package agent

// Running says how many environments the agent runs, until each one's
// teardown is done (its runtime removed what it left on the node).
func (a *Agent) Running() int { return a.count() }

// WarmReady says how many warm environments of the template are ready to
// be handed out: what a benchmark of warm leases waits for between leases.
func (a *Agent) WarmReady(template string) int {
	a.warm.mu.Lock()
	defer a.warm.mu.Unlock()
	n := 0
	for _, x := range a.warm.ready[template] {
		if alive(x.h) {
			n++
		}
	}
	return n
}
