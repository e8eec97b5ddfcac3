// Package serverstest reads what a running gRPC server of ratekit's service
// commands tells its clients at the HTTP/2 level. Only tests import it.
package serverstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// MaxConcurrentStreams connects to the gRPC server at addr, sends the
// HTTP/2 client preface and returns the SETTINGS_MAX_CONCURRENT_STREAMS of
// the server's first SETTINGS frame, and whether it set one.
func MaxConcurrentStreams(t testing.TB, addr string) (uint32, bool) {
	t.Helper()
	conn := handshake(t, addr)
	defer conn.Close()
	for range 16 { // the server's SETTINGS comes first; skip anything else
		var head [9]byte
		if _, err := io.ReadFull(conn, head[:]); err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatalf("reading a frame of %d bytes: %v", n, err)
		}
		if head[3] != 4 || head[4]&1 != 0 { // not SETTINGS, or an ACK
			continue
		}
		for i := 0; i+6 <= len(payload); i += 6 {
			if binary.BigEndian.Uint16(payload[i:]) == 3 { // SETTINGS_MAX_CONCURRENT_STREAMS
				return binary.BigEndian.Uint32(payload[i+2:]), true
			}
		}
		return 0, false
	}
	t.Fatal("no SETTINGS frame from the server")
	return 0, false
}

// handshake connects to the gRPC server at addr and sends the HTTP/2 client
// preface, then an empty SETTINGS frame (length 0, type 4, no flags, stream
// 0): what a client that then sends nothing sends. Reads and writes time out
// after 30 s.
func handshake(t testing.TB, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// IdleClosed connects to the gRPC server at addr, completes the HTTP/2
// handshake and then sends nothing but the acknowledgements of the server's
// pings. It returns once the server closes the connection, reporting
// whether it sent GOAWAY first; it fails the test when the connection is
// still open after 30 s.
func IdleClosed(t testing.TB, addr string) (goAway bool) {
	t.Helper()
	conn := handshake(t, addr)
	defer conn.Close()
	for {
		var head [9]byte
		if _, err := io.ReadFull(conn, head[:]); errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return goAway
		} else if err != nil {
			t.Fatalf("an idle connection is still open: %v", err)
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatalf("reading a frame of %d bytes: %v", n, err)
		}
		switch {
		case head[3] == 7: // GOAWAY
			goAway = true
		case head[3] == 6 && head[4]&1 == 0 && n == 8: // a PING: acknowledge it, as any client does
			ack := append([]byte{0, 0, 8, 6, 1, 0, 0, 0, 0}, payload...)
			if _, err := conn.Write(ack); err != nil {
				return goAway // closed meanwhile
			}
		}
	}
}
