package netstack

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
)

// tlsClient is a TLS client on c that names name and trusts nothing, for
// tests that only look at its ClientHello.
func tlsClient(c net.Conn, name string) *tls.Conn {
	return tls.Client(c, &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12})
}

// clientHello is the first TLS record a client naming name sends.
func clientHello(t *testing.T, name string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tlsClient(a, name).Handshake() }()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// splitRecord is rec's handshake message cut across two records.
func splitRecord(rec []byte) (first, second []byte) {
	body := rec[5:]
	half := len(body) / 2
	mk := func(p []byte) []byte {
		return append([]byte{rec[0], rec[1], rec[2], byte(len(p) >> 8), byte(len(p))}, p...)
	}
	return mk(body[:half]), mk(body[half:])
}

// sniff names what carries a name, says "TLS" or "HTTP" of what looks
// like it but carries none (so the caller decides on the address alone),
// and leaves everything else alone; it forwards every byte it read.
func TestSniff(t *testing.T) {
	hello := clientHello(t, "Example.TEST")
	split1, _ := splitRecord(hello)
	cases := []struct {
		name     string
		send     []byte
		wantName string
		wantKind string
	}{
		{"ClientHello with SNI", hello, "example.test", "sni"},
		{"ClientHello split across records", split1, "", "sni"},
		{"TLS record header, then the end", hello[:3], "", "sni"},
		{"GET with Host", []byte("GET / HTTP/1.1\r\nHost: Example.test:8080\r\n\r\n"), "example.test", "host"},
		{"a method this does not know", []byte("PROPFIND /x HTTP/1.1\r\nHost: dav.test\r\n\r\n"), "dav.test", "host"},
		{"HTTP/2 with prior knowledge", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "", "host"},
		{"HTTP/1.0 without Host", []byte("GET / HTTP/1.0\r\n\r\n"), "", "host"},
		{"request head cut short", []byte("GET / HTTP/1.1\r\nHost: a"), "", "host"},
		{"method, then the end", []byte("GET "), "", "host"},
		{"a text command, not HTTP", []byte("SET k v\r\n"), "", ""},
		{"ssh banner", []byte("SSH-2.0-OpenSSH_9.2\r\n"), "", ""},
		{"binary", []byte{0x00, 0x01, 0x02}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer b.Close()
			go func() {
				_, _ = a.Write(tc.send)
				a.Close()
			}()
			head, name, kind, err := sniff(b)
			if err != nil {
				t.Fatal(err)
			}
			if name != tc.wantName || kind != tc.wantKind {
				t.Errorf("sniff = %q, %q; want %q, %q", name, kind, tc.wantName, tc.wantKind)
			}
			if string(head) != string(tc.send[:len(head)]) || len(head) == 0 {
				t.Errorf("head %q is not a prefix of what was sent", head)
			}
		})
	}
}
