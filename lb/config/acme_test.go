package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// [frontend.acme]: each bad key is named with its file; a valid table loads with its defaults, its
// domains in lower case, and alone gives tls_listen its certificates.
func TestACMETableIsValidatedKeyByKey(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(notPEM, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFront := "[frontend]\ntls_listen = \"127.0.0.1:0\"\n"
	table := "[frontend.acme]\nstorage = \"" + dir + "\"\n"
	f := func(name, extra, want string) {
		t.Helper()
		loadFails(t, name, minimalConfig, extra, "20-bad.toml: frontend.acme."+want)
	}
	f("no domains", tlsFront+table, "domains: needs at least one DNS name")
	f("a wildcard", tlsFront+table+`domains = ["*.example.com"]`, `domains: "*.example.com": a wildcard needs the DNS-01 challenge`)
	f("an IP address", tlsFront+table+`domains = ["10.0.0.1"]`, `domains: "10.0.0.1": an IP address`)
	f("a port", tlsFront+table+`domains = ["a.example.com:443"]`, `domains: "a.example.com:443": has a port`)
	f("a single label", tlsFront+table+`domains = ["localhost"]`, `domains: "localhost": not a fully qualified name`)
	f("twice", tlsFront+table+`domains = ["a.example.com", "A.example.com."]`, `domains: "a.example.com" is listed twice`)
	f("no storage", tlsFront+"[frontend.acme]\ndomains = [\"a.example.com\"]\n", "storage: needs a directory")
	f("not https", tlsFront+table+"domains = [\"a.example.com\"]\ndirectory = \"http://acme.example.com/dir\"\n", `directory: must be an https URL`)
	f("a bad email", tlsFront+table+"domains = [\"a.example.com\"]\nemail = \"ops\"\n", `email: "ops" is not an email address`)
	f("a short interval", tlsFront+table+"domains = [\"a.example.com\"]\nrenew_check_interval = \"10ms\"\n", "renew_check_interval: must be 1s to 24h")
	f("a bad interval", tlsFront+table+"domains = [\"a.example.com\"]\nrenew_check_interval = \"soon\"\n", `renew_check_interval: bad duration "soon"`)
	f("a ca_root without PEM", tlsFront+table+"domains = [\"a.example.com\"]\nca_root = \""+notPEM+"\"\n", "ca_root: "+notPEM+" holds no PEM certificate")
	f("a missing ca_root", tlsFront+table+"domains = [\"a.example.com\"]\nca_root = \""+dir+"/none.pem\"\n", "ca_root: open "+dir+"/none.pem")
	f("without tls_listen", table+`domains = ["a.example.com"]`, "domains: needs tls_listen")
	f("listeners on two hosts", "[frontend]\nlisten = \"127.0.0.1:0\"\ntls_listen = \"127.0.0.2:0\"\n"+table+`domains = ["a.example.com"]`,
		`domains: needs listen and tls_listen on the same host ("127.0.0.1", "127.0.0.2")`)

	cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": minimalConfig,
		"20-acme.toml": tlsFront + table + "domains = [\"Twx.Example.com\", \"devices.example.com.\"]\nemail = \"ops@example.com\"\n"}))
	if err != nil {
		t.Fatalf("[frontend.acme] alone for tls_listen: %v", err)
	}
	a := cfg.Frontend.ACME
	if a.Directory != LetsEncrypt || a.RenewCheckInterval.D != 10*time.Minute || a.Roots != nil {
		t.Errorf("defaults: directory %q, renew_check_interval %s, roots %v", a.Directory, a.RenewCheckInterval.D, a.Roots)
	}
	if !slices.Equal(a.Domains, []string{"twx.example.com", "devices.example.com"}) {
		t.Errorf("domains %q, want them in lower case without the trailing dot", a.Domains)
	}
	if len(cfg.Frontend.TLS.Certs) != 0 {
		t.Errorf("%d certificates from files, want none", len(cfg.Frontend.TLS.Certs))
	}
	if !a.Same(a) || a.Same(nil) || (*ACME)(nil).Same(a) || !(*ACME)(nil).Same(nil) {
		t.Error("Same: a table is the same as itself only")
	}
	b := *a
	b.Domains = []string{"twx.example.com"}
	if a.Same(&b) {
		t.Error("Same: a table with another list of domains is not the same")
	}
}
