package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel is one redis-server in sentinel mode watching a master named MasterName.
type Sentinel struct {
	Port       int
	MasterName string
}

// StartSentinel runs a sentinel watching master, stopped when the test ends.
func StartSentinel(t testing.TB, master *Server) *Sentinel {
	t.Helper()
	s := &Sentinel{Port: freePort(t), MasterName: "payrouter-test"}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n", s.Port, dir, s.MasterName, master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	startProcess(t, master.bin, dir, "sentinel", s.Port, conf, "--sentinel")
	return s
}

// URL is the state.redis_url that reaches the master through this sentinel.
func (s *Sentinel) URL() string {
	return fmt.Sprintf("redis://127.0.0.1:%d/0?master_name=%s", s.Port, s.MasterName)
}

// Cluster is a Redis Cluster of three masters (no replicas) on loopback.
type Cluster struct {
	Ports []int
}

// StartCluster runs three cluster-enabled redis-servers and joins them into one cluster with
// redis-cli, waiting until every slot is served; stopped when the test ends. It fails the test
// when redis-cli is missing (Debian's redis-tools, a dependency of redis-server).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not on PATH: apt-get install redis-server")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli is not on PATH: apt-get install redis-tools")
	}
	c := &Cluster{}
	var addrs []string
	for range 3 {
		port := freePort(t)
		dir := t.TempDir()
		startProcess(t, bin, dir, "cluster node", port, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		c.Ports = append(c.Ports, port)
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command(cli, "-p", strconv.Itoa(c.Ports[0]), "cluster", "info").CombinedOutput()
		if err == nil && strings.Contains(string(out), "cluster_state:ok") {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster is not ok 10s after redis-cli created it:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the state.redis_url of the cluster: one seed node, the others as addr parameters.
func (c *Cluster) URL() string {
	u := fmt.Sprintf("redis://127.0.0.1:%d", c.Ports[0])
	for i, p := range c.Ports[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += fmt.Sprintf("%saddr=127.0.0.1:%d", sep, p)
	}
	return u
}

// startProcess runs redis-server with args in dir and waits until port accepts connections;
// the process is killed when the test ends.
func startProcess(t testing.TB, bin, dir, what string, port int, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server (%s): %v", what, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("redis-server (%s) does not accept connections on %s after 10s; its log:\n%s", what, addr, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
