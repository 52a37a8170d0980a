package discoverytest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/go-zookeeper/zk"
)

// zkJar is Debian's ZooKeeper (its manifest names the jars it needs).
const zkJar = "/usr/share/java/zookeeper.jar"

// A ZooKeeper is a real standalone ZooKeeper server of the test (Debian's zookeeper package), on a free
// loopback port with a data directory of its own, killed at the end of the test. Its tick is 100ms, so
// that sessions of a second or two are allowed and expire on time.
type ZooKeeper struct {
	t    testing.TB
	java string
	Addr string // host:port of its clients
	Dir  string // zoo.cfg, data/ (its whole state) and zookeeper.log
	cmd  *exec.Cmd
	done chan struct{}
}

// StartZooKeeper starts a ZooKeeper server, or skips the test when ZooKeeper is not installed.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	java, err := exec.LookPath("java")
	if _, serr := os.Stat(zkJar); serr != nil || err != nil {
		t.Skip("ZooKeeper is not installed (Debian: apt-get install zookeeper, as .ci/run does)")
	}
	z := &ZooKeeper{t: t, java: java, Addr: testkit.Addr(t), Dir: t.TempDir()}
	_, port, _ := net.SplitHostPort(z.Addr)
	cfg := fmt.Sprintf(`tickTime=100
minSessionTimeout=200
maxSessionTimeout=60000
dataDir=%s
clientPort=%s
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok
preAllocSize=1024
`, filepath.Join(z.Dir, "data"), port)
	if err := os.WriteFile(filepath.Join(z.Dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	z.Start()
	t.Cleanup(z.Stop)
	return z
}

// Start runs the server (again: same port, same data) and waits until it answers "ruok".
func (z *ZooKeeper) Start() {
	t := z.t
	t.Helper()
	cp := zkJar
	if _, err := os.Stat("/usr/share/java/slf4j-nop.jar"); err == nil {
		cp += ":/usr/share/java/slf4j-nop.jar" // no "no SLF4J binding" warning
	}
	out, err := os.OpenFile(filepath.Join(z.Dir, "zookeeper.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(z.java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dzookeeper.forceSync=no",
		"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(z.Dir, "zoo.cfg"))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = testkit.DieWithTest() // never outlives the test binary (on Linux)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck
	z.cmd, z.done = cmd, done
	for deadline := time.Now().Add(30 * time.Second); !z.ruok(); {
		select {
		case <-done:
			t.Fatalf("ZooKeeper exited:\n%s", z.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ZooKeeper did not answer within 30s:\n%s", z.log())
		}
		time.Sleep(20 * time.Millisecond) // polling its port while the JVM starts
	}
}

// Stop kills the server (as a crash would).
func (z *ZooKeeper) Stop() {
	if z.cmd != nil {
		z.cmd.Process.Kill() //nolint:errcheck
		<-z.done
		z.cmd = nil
	}
}

func (z *ZooKeeper) ruok() bool {
	c, err := net.DialTimeout("tcp", z.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck
	if _, err := c.Write([]byte("ruok")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return string(b) == "imok"
}

func (z *ZooKeeper) log() string {
	b, _ := os.ReadFile(filepath.Join(z.Dir, "zookeeper.log"))
	return string(b)
}

// zkQuiet drops the test client's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// Client connects the test to addr (a session of 30s), waits for its session and closes it at the end
// of the test. It reconnects by itself after a restart of the server.
func Client(t testing.TB, addr string) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, 30*time.Second, zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn
			}
		case <-timeout:
			t.Fatal("the test's ZooKeeper client got no session within 10s")
		}
	}
}

// Put creates path (and its missing parents, with the same ACL; default: open to all) or sets its data,
// as a registering instance does.
func Put(t testing.TB, conn *zk.Conn, path, data string, acl ...zk.ACL) {
	t.Helper()
	if len(acl) == 0 {
		acl = zk.WorldACL(zk.PermAll)
	}
	for i := 1; i < len(path); i++ {
		if path[i] == '/' {
			if _, err := conn.Create(path[:i], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatalf("creating %s: %v", path[:i], err)
			}
		}
	}
	_, err := conn.Create(path, []byte(data), 0, acl)
	if errors.Is(err, zk.ErrNodeExists) {
		_, err = conn.Set(path, []byte(data), -1)
	}
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

// Delete deletes path, as a deregistering instance does.
func Delete(t testing.TB, conn *zk.Conn, path string) {
	t.Helper()
	if err := conn.Delete(path, -1); err != nil {
		t.Fatalf("deleting %s: %v", path, err)
	}
}

// A Partition forwards connections to a server; Cut closes them all and refuses new ones (accepted and
// closed at once) until Heal: a network partition while the server runs on.
type Partition struct {
	Addr   string // where clients connect
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

// StartPartition forwards a loopback port to target until the end of the test.
func StartPartition(t testing.TB, target string) *Partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Partition{Addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	return p
}

func (p *Partition) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.cut {
			p.mu.Unlock()
			c.Close()
			if u != nil {
				u.Close()
			}
			continue
		}
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		go func() { io.Copy(u, c); u.Close(); c.Close() }() //nolint:errcheck
		go func() { io.Copy(c, u); c.Close(); u.Close() }() //nolint:errcheck
	}
}

// Cut closes every forwarded connection and refuses new ones.
func (p *Partition) Cut() { p.set(true) }

// Heal forwards new connections again.
func (p *Partition) Heal() { p.set(false) }

func (p *Partition) set(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}
