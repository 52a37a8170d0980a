package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

// makeInstall runs `make -s install` with vars (DESTDIR=..., PREFIX=...) in the repository's root and
// returns its output.
func makeInstall(t *testing.T, vars ...string) string {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", append([]string{"-s", "install"}, vars...)...)
	cmd.Dir = root
	// Under `make test`, the outer make's flags (its jobserver) are not this make's.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make install %s: %v\n%s", strings.Join(vars, " "), err, out)
	}
	return string(out)
}

// tree lists the files under dir, relative to it.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestMakeInstallStagesTheBinaryTheConfigAndTheUnitUnderDESTDIRAndKeepsAnExistingConfig(t *testing.T) {
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	makeInstall(t, "DESTDIR="+dest)

	want := []string{"usr/local/bin/fairlead", "usr/local/lib/systemd/system/fairlead.service",
		"etc/fairlead/REFERENCE.md", "etc/fairlead/keepalived.conf.example", "etc/fairlead/grafana-fairlead.json"}
	shipped, _ := filepath.Glob(filepath.Join(root, "conf.d", "*.toml"))
	for _, f := range shipped {
		want = append(want, "etc/fairlead/"+filepath.Base(f))
	}
	slices.Sort(want)
	if got := tree(t, dest); !slices.Equal(got, want) {
		t.Fatalf("installed tree:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	bin := filepath.Join(dest, "usr/local/bin/fairlead")
	if st, err := os.Stat(bin); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the binary: %v %v, want mode 0755", st.Mode(), err)
	}
	confDir := filepath.Join(dest, "etc/fairlead")
	if out, err := exec.Command(bin, "-check", "-config", confDir).CombinedOutput(); err != nil {
		t.Errorf("the installed binary does not accept the installed config: %v\n%s", err, out)
	}
	checkProductionConfig(t, confDir)
	unit, _ := os.ReadFile(filepath.Join(dest, "usr/local/lib/systemd/system/fairlead.service"))
	shippedUnit, _ := os.ReadFile(filepath.Join(root, "conf.d", "fairlead.service"))
	if !bytes.Equal(unit, shippedUnit) || !bytes.Contains(unit, []byte("\nExecStart=/usr/local/bin/fairlead -config /etc/fairlead\n")) {
		t.Errorf("the unit installed with the default PREFIX is not conf.d/fairlead.service with its paths as they are:\n%s", unit)
	}

	// An operator edits one file and removes another; the reference is stale. A reinstall (an upgrade)
	// keeps the config as it is and refreshes the reference.
	edited := "# the operator's own\n"
	if err := os.WriteFile(filepath.Join(confDir, "20-platform.toml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(confDir, "40-relay.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "REFERENCE.md"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := makeInstall(t, "DESTDIR="+dest)
	if !strings.Contains(out, "already has *.toml files: left as they are") {
		t.Errorf("the reinstall does not say it kept the config:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(confDir, "20-platform.toml")); string(b) != edited {
		t.Errorf("the reinstall overwrote an edited config file: %q", b)
	}
	if _, err := os.Stat(filepath.Join(confDir, "40-relay.toml")); err == nil {
		t.Error("the reinstall put back a config file the operator had removed")
	}
	if b, _ := os.ReadFile(filepath.Join(confDir, "REFERENCE.md")); string(b) == "stale" {
		t.Error("the reinstall did not refresh REFERENCE.md")
	}
}

// TestSystemdAcceptsTheInstalledUnit installs under a PREFIX and SYSCONFDIR of the test's own (no
// DESTDIR), so that the unit's ExecStart names a binary that exists, as systemd-analyze verify requires,
// and checks that verify says nothing about it: it exits 0 even for an unknown key or a bad value, which
// it only reports (a unit with such a mistake is verified too, to show that the report is seen).
func TestSystemdAcceptsTheInstalledUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is missing: apt-get install systemd")
	}
	prefix := t.TempDir()
	makeInstall(t, "PREFIX="+filepath.Join(prefix, "usr"), "SYSCONFDIR="+filepath.Join(prefix, "etc"))
	unitPath := filepath.Join(prefix, "usr/lib/systemd/system/fairlead.service")
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	execStart := "\nExecStart=" + filepath.Join(prefix, "usr/bin/fairlead") + " -config " + filepath.Join(prefix, "etc/fairlead") + "\n"
	if !strings.Contains(string(unit), execStart) {
		t.Fatalf("the unit's ExecStart does not follow PREFIX and SYSCONFDIR (want %q):\n%s", execStart, unit)
	}
	for _, key := range []string{"User=fairlead", "AmbientCapabilities=CAP_NET_BIND_SERVICE", "LimitNOFILE=",
		"ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict"} {
		if !strings.Contains(string(unit), "\n"+key) {
			t.Errorf("the unit has no %s", key)
		}
	}
	verify := func(path string) string {
		t.Helper()
		out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
		if err != nil {
			return string(out) + err.Error()
		}
		return string(out)
	}
	if out := verify(unitPath); out != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", unitPath, out)
	}

	bad := filepath.Join(t.TempDir(), "fairlead.service")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(unit), "\nProtectSystem=", "\nProtectSystm=", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := verify(bad); !strings.Contains(out, "ProtectSystm") {
		t.Errorf("systemd-analyze verify reports nothing about an unknown key: %q", out)
	}
}

// demoAddress matches the addresses of `make run`'s simulator (127.0.0.1:9000-9999: platforms 9081-9082,
// connection servers 9181-9182, configuration servers 9281-9282, App Configuration 9290-9292, control 9000).
var demoAddress = regexp.MustCompile(`127\.0\.0\.1:9\d\d\d\b`)

// inlineCredentials matches a credentials key with a value, commented or not (`# credentials = ""`, which
// shows the default, does not match).
var inlineCredentials = regexp.MustCompile(`(?m)^[#\s]*credentials\s*=\s*"[^"]+"`)

// checkProductionConfig checks that the installed config is a production starting point, not the demo:
// no LeaderCheck credentials inline in a 0644 file, no live relay (its upstreams would be the demo's), no
// live key pointing at the temporary directory (the unit's private /tmp is emptied at every stop), no
// line naming the simulator's addresses, no demo key file.
func checkProductionConfig(t *testing.T, confDir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(confDir, "*"))
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasPrefix(base, "demo-") {
			t.Errorf("the demo file %s is installed", base)
		}
		if !strings.HasSuffix(base, ".toml") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := inlineCredentials.Find(b); m != nil {
			t.Errorf("%s: inline credentials in an installed file: %s", base, m)
		}
		if m := demoAddress.Find(b); m != nil {
			t.Errorf("%s: names the demo's address %s", base, m)
		}
		for i, line := range strings.Split(string(b), "\n") {
			live, _, _ := strings.Cut(line, "#")
			live = strings.TrimSpace(live)
			if strings.HasPrefix(live, "[relays.") || strings.HasPrefix(live, "[[relays") {
				t.Errorf("%s:%d: a live relay: %s (relays are examples, commented out)", base, i+1, live)
			}
			if strings.Contains(live, "/tmp") {
				t.Errorf("%s:%d: points at the temporary directory: %s", base, i+1, live)
			}
		}
	}
}
