package tunnel

import "net"

// OpenRaw opens a stream without the request line, for tests of what the
// agent does with a stream that does not follow the protocol.
func OpenRaw(s *Session) (net.Conn, error) { return s.mux.OpenStream() }
