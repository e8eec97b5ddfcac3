package promtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tries bounds the ports Start tries.
const tries = 5

// Start runs the Prometheus binary bin with the configuration file config on
// a free loopback port, and returns its base URL once it is ready; it is
// killed at cleanup, and its log shown if the test failed. A port found free
// may be taken before Prometheus binds it: then Prometheus exits, and another
// port is tried. An answer from another process on the port does not count:
// the flags it answers with must name this run's data directory.
func Start(t testing.TB, bin, config string) string {
	t.Helper()
	dir := t.TempDir()
	// A bounded wait: another process on the port may accept and never answer.
	client := &http.Client{Timeout: 2 * time.Second}
ports:
	for try := 1; ; try++ {
		addr := FreeAddr(t)
		data := filepath.Join(dir, fmt.Sprintf("data%d", try))
		cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+data,
			"--web.listen-address="+addr, "--log.level=warn")
		logName := filepath.Join(dir, fmt.Sprintf("prometheus%d.log", try))
		logFile, err := os.Create(logName)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			_ = logFile.Close()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if t.Failed() {
				b, _ := os.ReadFile(logName)
				t.Logf("prometheus log (try %d):\n%s", try, b)
			}
		})
		base := "http://" + addr
		ours := func() bool { // ready, and its flags name our data directory
			resp, err := client.Get(base + "/-/ready")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
			if resp, err = client.Get(base + "/api/v1/status/flags"); err != nil {
				return false
			}
			defer resp.Body.Close()
			var flags struct {
				Data map[string]string `json:"data"`
			}
			return json.NewDecoder(resp.Body).Decode(&flags) == nil && flags.Data["storage.tsdb.path"] == data
		}
		for deadline := time.Now().Add(90 * time.Second); !ours(); time.Sleep(100 * time.Millisecond) {
			select {
			case <-exited:
				log, _ := os.ReadFile(logName)
				if !strings.Contains(string(log), "address already in use") || try == tries {
					t.Fatalf("prometheus on %s exited, try %d of %d:\n%s", addr, try, tries, log)
				}
				t.Logf("prometheus on %s: address already in use (try %d of %d): trying another port", addr, try, tries)
				continue ports
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("prometheus on %s not ready after 90s", addr)
			}
		}
		return base
	}
}

// FreeAddr is a loopback address whose port was free a moment ago, for a
// Prometheus to listen on: another process may take it first, so a caller
// retries on another when its Prometheus exits (Start does).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
