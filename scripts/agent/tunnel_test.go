package main

import (
	"io"
	"testing"
)

// The tunnel endpoint's flags reach the agent's configuration.
func TestTunnelFlags(t *testing.T) {
	env := func(k string) string {
		if k == "ENVLEASE_NODE_TOKEN" {
			return "els_node_fromenv"
		}
		return ""
	}
	o, err := parse([]string{"-tunnel-addr", "0.0.0.0:7443", "-tunnel-url", "wss://node-1.example/tunnel"}, env, io.Discard)
	if err != nil || o.cfg.TunnelAddr != "0.0.0.0:7443" || o.cfg.TunnelURL != "wss://node-1.example/tunnel" || o.cfg.NoTunnel {
		t.Fatalf("tunnel flags: %+v %v", o.cfg, err)
	}
	if o, err := parse([]string{"-no-tunnel"}, env, io.Discard); err != nil || !o.cfg.NoTunnel {
		t.Fatalf("-no-tunnel: %v %v", o.cfg.NoTunnel, err)
	}
}
