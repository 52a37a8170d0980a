package main

// Client connection errors in a real fairlead process (issue 21): a client that aborts or is refused
// leaves no byte of its request in the log, at log_level debug too; each error is counted by kind;
// and the debug lines are rate-limited.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// secretHead is a request head cut in its middle, with credentials in it.
const secretHead = "GET /Thingworx/Things HTTP/1.1\r\nHost: x\r\nAuthorization: Basic c2VjcmV0OnBhc3M=\r\nappKey: 11111111-2222"

// secretMarks are bytes of the requests below that no log line may hold: the credentials, header names
// and the line ends fasthttp's quoting of a buffer would show.
var secretMarks = []string{"c2VjcmV0", "appKey", "11111111", "Authorization", "Basic ", "Host: x", `\r\n`, "contents:", "buffer size"}

// clientEnd is how a test client ends its connection.
type clientEnd int

const (
	endClose  clientEnd = iota // close it (FIN)
	endReset                   // reset it (SO_LINGER 0)
	endAnswer                  // read fairlead's answer (until fairlead closes), then close
)

// sendAndEnd writes raw on conn and ends the connection as end says; it returns what fairlead answered
// (endAnswer only).
func sendAndEnd(t *testing.T, conn net.Conn, raw string, end clientEnd) string {
	t.Helper()
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	switch end {
	case endReset:
		tc, ok := conn.(*net.TCPConn)
		if !ok {
			t.Fatalf("a reset needs a TCP connection, not %T", conn)
		}
		tc.SetLinger(0) //nolint:errcheck
	case endAnswer:
		b, _ := io.ReadAll(bufio.NewReader(conn)) // until fairlead closes, or the deadline
		return string(b)
	}
	return ""
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestAbortedAndRefusedConnectionsLeaveNoRequestByteInTheLogAndAreCountedByKind(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	ca, err := sim.NewCA("fairlead test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("fairlead.example", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.Write(t.TempDir(), "frontend")
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr := testkit.Addr(t)
	p := startProc(t, c, fmt.Sprintf("[frontend]\ntls_listen = %q\ntls_cert = %q\ntls_key = %q\nheader_timeout = \"300ms\"\n",
		tlsAddr, certFile, keyFile))
	count := func(kind string) int {
		n, _ := strconv.Atoi(p.Metric(`fairlead_frontend_connection_errors_total{kind="` + kind + `"}`))
		return n
	}
	// expect runs do and waits until the errors of kind grew by n.
	expect := func(kind string, n int, what string, do func()) {
		t.Helper()
		before := count(kind)
		do()
		p.Eventually(fmt.Sprintf("%s to count %d more %s", what, n, kind), func() bool { return count(kind) >= before+n })
	}
	checkLog := func(when string) {
		t.Helper()
		for _, m := range secretMarks {
			if strings.Contains(p.Log.String(), m) {
				t.Errorf("%s: the log holds %q:\n%s", when, m, p.Log.String())
			}
		}
	}

	// At the default log_level (info) an aborted connection is counted and not logged.
	expect("closed", 1, "a close in the middle of a head", func() { sendAndEnd(t, dialTCP(t, p.Addr), secretHead, endClose) })
	if strings.Contains(p.Log.String(), "connection error") {
		t.Errorf("at log_level info a connection error was logged:\n%s", p.Log.String())
	}
	checkLog("at info")

	// log_level is applied by a reload.
	p.Write("30-level.toml", "[global]\nlog_level = \"debug\"\n")
	p.Eventually("the log_level reload", func() bool { return p.Metric("fairlead_config_reloads_total") == "1" })

	expect("closed", 1, "a close in the middle of a head", func() { sendAndEnd(t, dialTCP(t, p.Addr), secretHead, endClose) })
	expect("closed", 1, "a close in the middle of a body", func() {
		sendAndEnd(t, dialTCP(t, p.Addr), "POST /Thingworx/Things HTTP/1.1\r\nHost: x\r\nAuthorization: Basic c2VjcmV0OnBhc3M=\r\n"+
			"Content-Length: 100\r\n\r\nappKey=11111111-2222", endClose)
	})
	expect("closed", 1, "a close in the middle of a head over TLS", func() {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", tlsAddr,
			&tls.Config{RootCAs: ca.Pool(), ServerName: "fairlead.example"})
		if err != nil {
			t.Fatal(err)
		}
		sendAndEnd(t, conn, secretHead, endClose)
	})
	expect("reset", 1, "a reset in the middle of a head", func() { sendAndEnd(t, dialTCP(t, p.Addr), secretHead, endReset) })
	expect("timeout", 1, "a head not complete within header_timeout", func() {
		if a := sendAndEnd(t, dialTCP(t, p.Addr), secretHead, endAnswer); !strings.HasPrefix(a, "HTTP/1.1 408 ") {
			t.Errorf("a head cut for header_timeout: got %q, want 408", a)
		}
	})
	expect("refused", 1, "a framing violation", func() {
		if a := sendAndEnd(t, dialTCP(t, p.Addr), secretHead+"\r\nX A: 1\r\n\r\n", endAnswer); !strings.HasPrefix(a, "HTTP/1.1 400 ") {
			t.Errorf("a framing violation: got %q, want 400", a)
		}
	})
	expect("tls", 1, "plain HTTP on the TLS listener", func() { sendAndEnd(t, dialTCP(t, tlsAddr), secretHead+"\r\n\r\n", endAnswer) })
	// The admin listener's aborted connections are logged the same way (without a counter).
	sendAndEnd(t, dialTCP(t, p.Admin), "GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Basic c2VjcmV0OnBhc3M=\r\nappKey: 11111111", endClose)
	p.Eventually("the admin connection error line", func() bool {
		return strings.Contains(p.Log.String(), `msg="admin: connection error" kind=closed client=127.0.0.1`)
	})
	for _, kind := range []string{"closed", "reset", "timeout", "refused", "tls"} {
		if want := `level=DEBUG msg="frontend: connection error" kind=` + kind + ` client=127.0.0.1 suppressed=`; !strings.Contains(p.Log.String(), want) {
			t.Errorf("no line %q in the log:\n%s", want, p.Log.String())
		}
	}

	// 200 aborted connections make a handful of lines, not 200: one per kind every 10 s.
	lines := func() int { return strings.Count(p.Log.String(), `msg="frontend: connection error" kind=closed`) }
	before := lines()
	expect("closed", 200, "200 closes in the middle of a head", func() {
		for range 200 {
			sendAndEnd(t, dialTCP(t, p.Addr), secretHead, endClose)
		}
	})
	if n := lines() - before; n > 2 {
		t.Errorf("200 aborted connections made %d more lines, want at most 2 (one per 10 s)", n)
	}
	checkLog("at debug")

	// A bad log_level is a failed reload naming the file and the key; the running config stays.
	bad := p.Write("30-level.toml", "[global]\nlog_level = \"loud\"\n")
	p.Eventually("the bad log_level to be refused", func() bool { return p.Metric("fairlead_config_last_reload_successful") == "0" })
	// The gauge can turn before the line reaches the log: wait for the line, not for a moment.
	want := bad + ": global.log_level: unknown log level"
	p.Eventually("the failed reload to name "+want, func() bool { return strings.Contains(p.Log.String(), want) })
}

func TestABadLogLevelExits2NamingFileAndKey(t *testing.T) {
	base := "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n[[routes]]\npool = \"platform\"\n"
	expectConfigError(t, base, "bad log_level", "[global]\nlog_level = \"verbose\"\n",
		`global.log_level: unknown log level "verbose" (want "debug", "info", "warn" or "error")`)
}
