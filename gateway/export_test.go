package gateway

// Kill stops the gateway as a crash would: no more heartbeats or sweeps,
// its sessions not ended, its tasks left where they are.
func (g *Gateway) Kill() {
	g.mu.Lock()
	if !g.closed {
		close(g.stop)
		g.closed = true
	}
	g.mu.Unlock()
	g.wg.Wait()
}
