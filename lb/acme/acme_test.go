package acme

import (
	"crypto/tls"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/fairlead/fairlead/lb/config"
)

func newTestManager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(&config.ACME{Directory: "https://127.0.0.1:1/dir", Domains: []string{"twx.example.com"},
		Storage: t.TempDir(), RenewCheckInterval: config.Duration{D: time.Minute}}, "127.0.0.1:8080", "127.0.0.1:8443", Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// Only the domains reach the library: another name is the files' to answer, a TLS-ALPN-01 handshake
// for another name fails, and an HTTP-01 path for another host is routed as any request.
func TestOnlyTheDomainsReachTheLibrary(t *testing.T) {
	m := newTestManager(t)
	if _, ok, _ := m.Certificate(&tls.ClientHelloInfo{ServerName: "other.example.com"}); ok {
		t.Error("another name: answered by ACME, want the files'")
	}
	if _, ok, _ := m.Certificate(&tls.ClientHelloInfo{ServerName: "TWX.example.com."}); ok {
		t.Error("a domain without a certificate yet: answered, want the files' until there is one")
	}
	if _, ok, err := m.Certificate(&tls.ClientHelloInfo{ServerName: "other.example.com", SupportedProtos: []string{ALPN}}); !ok || err == nil {
		t.Errorf("acme-tls/1 for another name: ok %v, err %v; want a failed handshake", ok, err)
	}
	if m.Default() != nil {
		t.Error("a default certificate before any was obtained")
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/.well-known/acme-challenge/abc")
	ctx.Request.Header.SetHost("other.example.com")
	if m.ServeHTTP01(&ctx) {
		t.Error("an HTTP-01 path for another host was answered")
	}
	ctx.Request.Header.SetHost("twx.example.com:80")
	if m.ServeHTTP01(&ctx) {
		t.Error("an HTTP-01 path for a challenge nobody started was answered")
	}
	for path, want := range map[string]bool{"/.well-known/acme-challenge/abc": true, "/.well-known/acme-challenge/": false, "/.well-known/x": false, "/": false} {
		if IsChallengePath([]byte(path)) != want {
			t.Errorf("IsChallengePath(%q) = %v", path, !want)
		}
	}
	if !m.Runs(m.cfg, "127.0.0.1:8080", "127.0.0.1:8443") || m.Runs(m.cfg, "127.0.0.1:8081", "127.0.0.1:8443") {
		t.Error("Runs: the same table on other listeners is another manager")
	}
	if st := m.Status(); len(st) != 1 || st[0].Name != "twx.example.com" || !st[0].NotAfter.IsZero() {
		t.Errorf("Status: %+v", st)
	}
}

// Storage that cannot be written is every domain's failure as soon as Manage starts (the library
// would fail its first attempt without an event), and Close is safe twice.
func TestUnwritableStorageFailsEveryDomainAtOnce(t *testing.T) {
	file := t.TempDir() + "/not-a-directory"
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var failed []string
	var mu sync.Mutex
	m, err := New(&config.ACME{Directory: "https://127.0.0.1:1/dir", Domains: []string{"a.example.com", "b.example.com"},
		Storage: file + "/acme", RenewCheckInterval: config.Duration{D: time.Minute}}, "", "127.0.0.1:8443", Hooks{
		Failed: func(name string, renewal bool, err error) {
			mu.Lock()
			defer mu.Unlock()
			if !renewal && strings.Contains(err.Error(), "cannot be written") {
				failed = append(failed, name)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	m.Manage() //nolint:errcheck
	m.Close()
	m.Close()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(failed, []string{"a.example.com", "b.example.com"}) {
		t.Errorf("failed at Manage: %q, want both domains", failed)
	}
	for _, st := range m.Status() {
		if !strings.Contains(st.LastError, "cannot be written") {
			t.Errorf("%s: last error %q", st.Name, st.LastError)
		}
	}
}

// The library's warnings and errors reach fairlead's log as one line each, with their fields; what
// cert_failed already says, and its Info and Debug lines, do not.
func TestTheLibrarysWarningsReachTheLog(t *testing.T) {
	var lines []string
	log := newLibraryLogger(func(l string) { lines = append(lines, l) })
	log.With(zap.String("identifier", "a.example.com")).Error("unable to obtain lock", zap.Error(errors.New("read-only file system")))
	log.Warn("ARI window or selected renewal time changed", zap.Int("attempt", 2))
	log.Error("could not get certificate from issuer", zap.String("identifier", "a.example.com"))
	log.Info("obtaining certificate")
	want := []string{`acme: unable to obtain lock (error=read-only file system, identifier=a.example.com)`,
		`acme: ARI window or selected renewal time changed (attempt=2)`}
	if !slices.Equal(lines, want) {
		t.Errorf("lines %q, want %q", lines, want)
	}
}
