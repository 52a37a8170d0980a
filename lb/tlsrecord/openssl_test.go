package tlsrecord

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenSSLAES256 covers TLS 1.3's AES-256-GCM-SHA384, which no crypto/tls server picks when the
// client is crypto/tls: an openssl s_server that offers only it (in -rev mode: it answers each line
// reversed) handshakes with a crypto/tls client, which a Conn then replaces; the Conn also asks
// openssl for a KeyUpdate. Skipped where openssl is not installed.
func TestOpenSSLAES256(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl")
	}
	dir := t.TempDir()
	cert := certs()[0]
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "s_server", "-accept", "127.0.0.1:0", "-cert", certFile, "-key", keyFile,
		"-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384", "-rev", "-naccept", "1", "-num_tickets", "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	addr := ""
	for addr == "" && lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "ACCEPT "); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatalf("openssl said no address: %s", stderr.String())
	}
	go io.Copy(io.Discard, out) //nolint:errcheck // the rest of its chatter

	raw, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	log := &keyLog{}
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, KeyLogWriter: log}) //nolint:gosec // a test's own certificate
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if s := tc.ConnectionState().CipherSuite; s != tls.TLS_AES_256_GCM_SHA384 {
		t.Fatalf("negotiated %s", tls.CipherSuiteName(s))
	}
	st, err := TLS13(tls.TLS_AES_256_GCM_SHA384, true, log.secrets["SERVER_TRAFFIC_SECRET_0"], log.secrets["CLIENT_TRAFFIC_SECRET_0"], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(raw, st)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Now().Add(time.Minute)) // bounded, should openssl not answer
	var got []byte
	buf := make([]byte, MaxRecord)
	// line sends a line and reads openssl's answer to it.
	line := func(s string) string {
		t.Helper()
		if _, err := c.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
		for {
			if i := bytes.IndexByte(got, '\n'); i >= 0 {
				l := string(got[:i])
				got = got[i+1:]
				return l
			}
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				t.Fatalf("after %q: %v (openssl: %s)", got, err, stderr.String())
			}
		}
	}
	if l := line("hello fairlead"); l != "daelriaf olleh" {
		t.Fatalf("openssl answered %q", l)
	}
	if err := c.KeyUpdate(true); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // under the new keys both ways (openssl reverses lines of up to 16 KiB)
		long := strings.Repeat(string(rune('a'+i))+"bcdefgh", 1000+i*500)
		if l := line(long); l != reverse(long) {
			t.Fatalf("openssl answered %d bytes, not the reversed line", len(l))
		}
	}
	if c.keyUpdateHandled != 1 {
		t.Fatalf("%d KeyUpdates from openssl, want 1", c.keyUpdateHandled)
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}
