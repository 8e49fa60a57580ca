package netstack

import (
	"crypto/tls"
	"net"
)

// tlsClient is a TLS client on c that names name and trusts nothing, for
// tests that only look at its ClientHello.
func tlsClient(c net.Conn, name string) *tls.Conn {
	return tls.Client(c, &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12})
}
