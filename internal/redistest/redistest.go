// Package redistest gives tests the real Redis servers that the test command
// starts (scripts/test.sh), and starts private ones for tests that must stop
// Redis mid-test.
//
// RATEKIT_TEST_REDIS_URL is redis://host:port of a standalone server;
// RATEKIT_TEST_REDIS_CLUSTER is a comma-separated host:port list of a 3-master
// cluster; RATEKIT_TEST_REDIS_SENTINEL is host:port[,host:port...]/master of
// the sentinels of a master with a replica. When a variable is unset the tests
// that need it skip, saying how to run them; when it is set, they never skip.
package redistest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	EnvURL      = "RATEKIT_TEST_REDIS_URL"
	EnvCluster  = "RATEKIT_TEST_REDIS_CLUSTER"
	EnvSentinel = "RATEKIT_TEST_REDIS_SENTINEL"
	howTo       = "run ./scripts/test.sh (or make test), which starts redis-server, a local cluster and a sentinel setup and sets %s"
)

// URL returns the standalone test server's URL, or skips the test.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		t.Skipf("%s not set: "+howTo, EnvURL, EnvURL)
	}
	return u
}

// ClusterAddrs returns the test cluster's node addresses, or skips the test.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(EnvCluster)
	if v == "" {
		t.Skipf("%s not set: "+howTo, EnvCluster, EnvCluster)
	}
	return strings.Split(v, ",")
}

// ClusterURL returns the test cluster as a redisstore.Dial URL
// (redis://node1?addr=node2&addr=node3), or skips the test.
func ClusterURL(t testing.TB) string {
	t.Helper()
	addrs := ClusterAddrs(t)
	return "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
}

// Sentinel returns the sentinel addresses and the master name of the test
// sentinel setup, or skips the test.
func Sentinel(t testing.TB) (addrs []string, master string) {
	t.Helper()
	v := os.Getenv(EnvSentinel)
	if v == "" {
		t.Skipf("%s not set: "+howTo, EnvSentinel, EnvSentinel)
	}
	hosts, master, ok := strings.Cut(v, "/")
	if !ok || master == "" {
		t.Fatalf("%s = %q, want host:port[,host:port...]/master", EnvSentinel, v)
	}
	return strings.Split(hosts, ","), master
}

// SentinelURL returns the test sentinel setup as a redisstore.Dial URL
// (redis-sentinel://host:port[,host:port...]/master), or skips the test.
func SentinelURL(t testing.TB) string {
	t.Helper()
	addrs, master := Sentinel(t)
	return "redis-sentinel://" + strings.Join(addrs, ",") + "/" + master
}

// SentinelClient returns a go-redis client of the test sentinel setup's
// master, closed at cleanup.
func SentinelClient(t testing.TB) *redis.Client {
	t.Helper()
	addrs, master := Sentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	ping(t, c)
	return c
}

// Client returns a client of the standalone test server, closed at cleanup.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ping(t, c)
	return c
}

// ClusterClient returns a client of the test cluster, closed at cleanup.
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: ClusterAddrs(t)})
	t.Cleanup(func() { _ = c.Close() })
	ping(t, c)
	return c
}

func ping(t testing.TB, c redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis ping: %v", err)
	}
}

// Prefix returns a key prefix unique to this test, so tests sharing a server
// never see each other's keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("test:%s:%s:", name, hex.EncodeToString(b[:]))
}

// Server is a private redis-server process.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	out  *os.File // the read end of cmd's stdout and stderr
	dir  string
	port int
	bus  int      // the cluster bus port; 0 for a standalone server
	args []string // extra redis-server arguments
	conf string   // a sentinel's configuration, written at its first start; "" for a server
}

// startTries bounds the ports a new server tries: a port found free may be
// taken (by another process or test) before redis-server binds it.
const startTries = 5

// errPortTaken is the error of a start whose redis-server found its port (or
// its cluster bus port) taken.
var errPortTaken = errors.New("port taken")

// StartServer starts a private redis-server on a free loopback port and stops
// it at cleanup. It needs redis-server on PATH, which the test command ensures;
// without it (and without EnvURL) the test skips.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return startServer(t, false)
}

func startServer(t testing.TB, cluster bool, args ...string) *Server {
	t.Helper()
	return launch(t, &Server{args: args}, cluster)
}

// launch starts s, a server or a sentinel, on a free port.
func launch(t testing.TB, s *Server, cluster bool) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(EnvURL) != "" {
			t.Fatalf("redis-server not on PATH although %s is set", EnvURL)
		}
		t.Skipf("redis-server not on PATH: "+howTo, EnvURL)
	}
	t.Cleanup(func() { s.Stop() })
	for try := 1; ; try++ {
		s.dir = t.TempDir() // a failed try's files (a cluster node's nodes.conf) stay behind
		s.port = freePort(t)
		if cluster {
			s.bus = freePort(t)
		}
		s.Addr = fmt.Sprintf("127.0.0.1:%d", s.port)
		err := s.start(bin)
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || try == startTries {
			t.Fatalf("redis-server, try %d of %d: %v", try, startTries, err)
		}
	}
}

// start runs redis-server on s.port and waits until it answers. It fails with
// errPortTaken when redis-server exits because the port is taken; an answer
// from another process on the port does not count.
func (s *Server) start(bin string) error {
	logFile := filepath.Join(s.dir, "redis.log")
	_ = os.Remove(logFile) // an earlier run's lines would be taken for this one's
	args := []string{"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no", "--logfile", logFile}
	if s.conf != "" {
		// A sentinel rewrites its configuration file (the master it follows,
		// the other sentinels): a file of its own, kept across a Restart.
		file := filepath.Join(s.dir, "sentinel.conf")
		if _, err := os.Stat(file); err != nil {
			if err := os.WriteFile(file, []byte(s.conf), 0o600); err != nil {
				return fmt.Errorf("write sentinel.conf: %w", err)
			}
		}
		args = append([]string{file, "--sentinel"}, args...)
	}
	if s.bus != 0 {
		args = append(args, "--cluster-enabled", "yes", "--cluster-port", fmt.Sprint(s.bus))
	}
	cmd := exec.Command(bin, append(args, s.args...)...)
	// The read end of its stdout ends (EOF) when redis-server exits: how the
	// wait below learns it, with no goroutine waiting on the process (tests
	// check that none outlives them while the server still runs).
	out, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = out.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.out = cmd, out
	exited := func() bool {
		_ = out.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		var b [512]byte
		_, err := out.Read(b[:])
		return errors.Is(err, io.EOF)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	pid := fmt.Sprintf("process_id:%d\r\n", cmd.Process.Pid)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if exited() {
			s.Stop() // reaps it
			log, _ := os.ReadFile(logFile)
			if bytes.Contains(log, []byte("Address already in use")) {
				return fmt.Errorf("redis-server on %s (cluster bus port %d): %w", s.Addr, s.bus, errPortTaken)
			}
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, log)
		}
		if info, err := c.Info(context.Background(), "server").Result(); err == nil && strings.Contains(info, pid) {
			return nil
		}
	}
	s.Stop()
	return fmt.Errorf("redis-server on %s did not answer within 30s", s.Addr)
}

// StartCluster starts a private Redis Cluster of n masters (no replicas) on
// free loopback ports, its slots split evenly, and waits until every node
// reports it ok. Like StartServer, for tests that must stop a node. args are
// more redis-server arguments of every node.
func StartCluster(t testing.TB, n int, args ...string) []*Server {
	t.Helper()
	nodes := make([]*Server, n)
	bus := make([]int, n) // each node's cluster bus port
	for i := range nodes {
		nodes[i] = startServer(t, true, append([]string{"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}, args...)...)
		bus[i] = nodes[i].bus
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const slots = 16384
	for i, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		defer c.Close()
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", i*slots/n, (i+1)*slots/n-1).Err(); err != nil {
			t.Fatalf("cluster addslotsrange on %s: %v", s.Addr, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(nodes[0].Addr)
			if err := c.Do(ctx, "CLUSTER", "MEET", host, port, bus[0]).Err(); err != nil {
				t.Fatalf("cluster meet from %s: %v", s.Addr, err)
			}
		}
	}
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		defer c.Close()
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cluster node %s not ok: %v %s", s.Addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nodes
}

// AddReplica starts a cluster node with args (StartCluster's) that
// replicates master, a node of nodes, and waits until it has synced: a
// failover drill's replica, which the cluster promotes when master fails.
func AddReplica(t testing.TB, nodes []*Server, master *Server, args ...string) *Server {
	t.Helper()
	r := startServer(t, true, append([]string{"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mc := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer mc.Close()
	id, err := mc.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatalf("cluster myid on %s: %v", master.Addr, err)
	}
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	host, port, _ := net.SplitHostPort(nodes[0].Addr)
	if err := rc.Do(ctx, "CLUSTER", "MEET", host, port, nodes[0].bus).Err(); err != nil {
		t.Fatalf("cluster meet from %s: %v", r.Addr, err)
	}
	for { // REPLICATE needs the master known to the new node
		err := rc.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("cluster replicate %s on %s: %v", master.Addr, r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return r
		}
		if ctx.Err() != nil {
			t.Fatalf("replica %s of %s never synced: %v %s", r.Addr, master.Addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitMaster waits until the cluster node s reports itself a master (a
// replica promoted after its master failed).
func (s *Server) WaitMaster(t testing.TB) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	poll(t, 60*time.Second, 50*time.Millisecond, func(ctx context.Context) string {
		role, err := c.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return ""
		}
		return fmt.Sprintf("%s not promoted to master: %v %v", s.Addr, role, err)
	})
}

// MasterOf returns the node of nodes that is the master of key's slot, as
// c, a client of their cluster, sees it.
func MasterOf(t testing.TB, c *redis.ClusterClient, nodes []*Server, key string) *Server {
	t.Helper()
	m, err := c.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatalf("master of %s: %v", key, err)
	}
	for _, n := range nodes {
		if n.Addr == m.Options().Addr {
			return n
		}
	}
	t.Fatalf("master of %s: %s is none of the nodes", key, m.Options().Addr)
	return nil
}

// URL returns redis://addr.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Stop kills the server (as an outage would) and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		_ = s.out.Close()
		s.cmd = nil
	}
}

// Pause stops the server process with SIGSTOP: the kernel still accepts TCP
// connections on its port, but nothing answers (a hung server).
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server: %v", err)
	}
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT redis-server: %v", err)
	}
}

// restartTries bounds the starts Restart tries: the port it must take again
// may be held for a moment by another process (a client's port of an
// outgoing connection, a test's port probe).
const restartTries = 50

// Restart starts the server again on the same port after Stop.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	for try := 1; ; try++ {
		err := s.start(bin)
		if err == nil {
			return
		}
		if !errors.Is(err, errPortTaken) || try == restartTries {
			t.Fatalf("restart redis-server, try %d of %d: %v", try, restartTries, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Blackhole listens on a loopback port, accepts connections and never answers:
// a server that hangs. It is closed at cleanup.
func Blackhole(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// UnusedAddr returns a loopback address where nothing listens: a connection
// to it is refused. A socket bound to its port, never listening, holds the
// port until cleanup, so no other process or test can listen there meanwhile
// (a port found free and let go could be taken by then).
func UnusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind a loopback port: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// SentinelSetup is a private Sentinel deployment: a master, a replica and
// three sentinels (quorum 2) on free loopback ports, for tests that fail
// the master over.
type SentinelSetup struct {
	Name      string // the master name the sentinels monitor
	Master    *Server
	Replica   *Server
	Sentinels []*Server
}

// Sentinel timings of StartSentinel: short, so that a failover drill takes
// seconds, and long enough that a loaded machine does not fail a healthy
// master over.
const (
	sentinelDownAfter       = 2 * time.Second
	sentinelFailoverTimeout = 10 * time.Second
)

// StartSentinel starts a SentinelSetup and waits until every sentinel
// knows the replica and the other sentinels, so that a failover can start
// at once. Everything is stopped at cleanup; on failure the sentinels' logs
// are part of the test's output.
func StartSentinel(t testing.TB) *SentinelSetup {
	t.Helper()
	st := &SentinelSetup{Name: "drill"}
	st.Master = startServer(t, false)
	host, port, _ := net.SplitHostPort(st.Master.Addr)
	st.Replica = startServer(t, false, "--replicaof", host, port)
	conf := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 2\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n",
		st.Name, host, port, sentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
	for range 3 {
		st.Sentinels = append(st.Sentinels, startSentinel(t, conf))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range st.Sentinels {
				log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
				t.Logf("sentinel %s log:\n%s", s.Addr, log)
			}
		}
	})
	for _, s := range st.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		defer c.Close()
		poll(t, 60*time.Second, 50*time.Millisecond, func(ctx context.Context) string {
			m, err := c.Master(ctx, st.Name).Result()
			if err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2" && m["flags"] == "master" {
				return ""
			}
			return fmt.Sprintf("sentinel %s does not know the setup: %v %v", s.Addr, m, err)
		})
	}
	st.Replica.WaitReplicaOf(t, st.Master)
	return st
}

func startSentinel(t testing.TB, conf string) *Server {
	t.Helper()
	return launch(t, &Server{conf: conf}, false)
}

// Addrs returns the sentinels' addresses.
func (st *SentinelSetup) Addrs() []string {
	addrs := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// URL returns the setup as a redisstore.Dial URL:
// redis-sentinel://host:port,host:port,host:port/name.
func (st *SentinelSetup) URL() string {
	return "redis-sentinel://" + strings.Join(st.Addrs(), ",") + "/" + st.Name
}

// WaitFailover waits until two of the sentinels (a majority of three) name
// next as the master and next reports itself one.
func (st *SentinelSetup) WaitFailover(t testing.TB, next *Server) {
	t.Helper()
	nc := redis.NewClient(&redis.Options{Addr: next.Addr})
	defer nc.Close()
	poll(t, 120*time.Second, 100*time.Millisecond, func(ctx context.Context) string {
		named := 0
		for _, s := range st.Sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
			qctx, cancel := context.WithTimeout(ctx, time.Second) // a sentinel may hang
			addr, err := c.GetMasterAddrByName(qctx, st.Name).Result()
			cancel()
			_ = c.Close()
			if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == next.Addr {
				named++
			}
		}
		role, err := nc.Do(ctx, "ROLE").Slice()
		if named >= 2 && err == nil && len(role) > 0 && role[0] == "master" {
			return ""
		}
		return fmt.Sprintf("no failover to %s: %d of %d sentinels name it, its role %v %v", next.Addr, named, len(st.Sentinels), role, err)
	})
}

// WaitReplicaOf waits until s is a replica of master with its link up (an
// old master that came back after a failover, reconfigured by the
// sentinels).
func (s *Server) WaitReplicaOf(t testing.TB, master *Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	host, port, _ := net.SplitHostPort(master.Addr)
	poll(t, 120*time.Second, 100*time.Millisecond, func(ctx context.Context) string {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_host:"+host+"\r\n") &&
			strings.Contains(info, "master_port:"+port+"\r\n") && strings.Contains(info, "master_link_status:up") {
			return ""
		}
		return fmt.Sprintf("%s not a replica of %s: %v %s", s.Addr, master.Addr, err, info)
	})
}

// poll calls check every interval until it returns "" or within has passed,
// then fails t with what check last returned. check's ctx ends at within.
func poll(t testing.TB, within, interval time.Duration, check func(ctx context.Context) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		msg := check(ctx)
		if msg == "" {
			return
		}
		if ctx.Err() != nil {
			t.Fatal(msg)
		}
		time.Sleep(interval)
	}
}
