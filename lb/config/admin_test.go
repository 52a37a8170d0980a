package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

// secretFile writes a secret file (with a trailing newline, as editors leave it) and returns its path.
func secretFile(t *testing.T, value string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestAdminConfigRequiresCredentialsOffLoopbackAndNeverShowsThem(t *testing.T) {
	const token, password = "tok-Q7-never-shown", "pw-Z3-never-shown"
	tokenFile, passwordFile := secretFile(t, token), secretFile(t, password)
	load := func(admin string) (*Config, error) {
		t.Helper()
		return Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": minimalConfig, "20-admin.toml": admin}))
	}
	wantErr := func(name, admin string, want ...string) {
		t.Helper()
		_, err := load(admin)
		if err == nil {
			t.Errorf("%s: loaded, want an error", name)
			return
		}
		if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), password) {
			t.Errorf("an error shows a secret: %v", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", name, err, w)
			}
		}
	}
	for _, listen := range []string{"0.0.0.0:0", ":8404", "[::]:0", "192.0.2.1:8404"} {
		wantErr("listen "+listen+" without credentials", fmt.Sprintf("[admin]\nlisten = %q\n", listen),
			"20-admin.toml", "admin.listen", listen)
	}
	for _, admin := range []string{
		fmt.Sprintf("[admin]\nlisten = \"0.0.0.0:0\"\ntoken_file = %q\n", tokenFile),
		fmt.Sprintf("[admin]\nlisten = \"0.0.0.0:0\"\nuser = \"ops\"\npassword_file = %q\n", passwordFile),
		"[admin]\nlisten = \"localhost:0\"\n",
		"[admin]\nlisten = \"[::1]:0\"\n",
	} {
		cfg, err := load(admin)
		if err != nil {
			t.Errorf("%q: %v", admin, err)
			continue
		}
		if cfg.AdminToken != "" && cfg.AdminToken != token {
			t.Errorf("the token was read as %q", cfg.AdminToken)
		}
		if cfg.AdminPassword != "" && cfg.AdminPassword != password {
			t.Errorf("the password was read as %q", cfg.AdminPassword)
		}
	}
	wantErr("user without password_file", "[admin]\nuser = \"ops\"\n", "20-admin.toml", "admin.user")
	wantErr("password_file without user", fmt.Sprintf("[admin]\npassword_file = %q\n", passwordFile), "admin.user")
	missing := filepath.Join(t.TempDir(), "no-such-token")
	wantErr("unreadable token_file", fmt.Sprintf("[admin]\ntoken_file = %q\n", missing), "20-admin.toml", "admin.token_file")
	wantErr("token_file a directory", fmt.Sprintf("[admin]\ntoken_file = %q\n", t.TempDir()), "admin.token_file")
	wantErr("empty token_file", fmt.Sprintf("[admin]\ntoken_file = %q\n", secretFile(t, "  ")), "admin.token_file")
	wantErr("unreadable password_file", fmt.Sprintf("[admin]\nuser = \"ops\"\npassword_file = %q\n", missing), "admin.password_file")
	// Other problems of a config with readable secrets do not show them either.
	wantErr("bad user with secrets", fmt.Sprintf("[admin]\nlisten = \"0.0.0.0:0\"\ntoken_file = %q\nuser = \"o:ps\"\npassword_file = %q\n[frontend]\nlisen = 1\n",
		tokenFile, passwordFile), "admin.user", "frontend.lisen")
}
