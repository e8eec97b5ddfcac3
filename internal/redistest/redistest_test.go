package redistest

import (
	"errors"
	"net"
	"os/exec"
	"testing"
)

// A port found free may be taken before redis-server binds it: start then
// reports errPortTaken (StartServer tries another port, Restart tries again)
// rather than taking whatever accepts connections there for the server.
func TestStartFindsThePortTaken(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("redis-server not on PATH: "+howTo, EnvURL)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accepts, as another process's listener would
		var held []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				break
			}
			held = append(held, c)
		}
		for _, c := range held {
			_ = c.Close()
		}
	}()
	s := &Server{dir: t.TempDir(), port: l.Addr().(*net.TCPAddr).Port, Addr: l.Addr().String()}
	defer s.Stop()
	if err := s.start(bin); !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a port another listener holds: %v, want errPortTaken", err)
	}
}

// UnusedAddr refuses connections, and holds its port: nothing else can listen
// there until the test ends.
func TestUnusedAddrHoldsThePort(t *testing.T) {
	addr := UnusedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("a connection to UnusedAddr %s was accepted", addr)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("listening on UnusedAddr %s succeeded: another server could take it", addr)
	}
}
