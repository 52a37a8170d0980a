package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

// credentialsFileConfig is minimalConfig with the platform's check credentials read from file.
func credentialsFileConfig(file string) string {
	return minimalConfig + "[pools.platform.check]\ncredentials_file = \"" + file + "\"\n"
}

func TestCheckCredentialsFileHoldsWhatCredentialsWouldAndARewriteIsAConfigChange(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "leadercheck-credentials")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(secret, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("YWRtaW46YWRtaW4=\n") // admin:admin, with the newline an editor adds
	confd := testkit.WriteFiles(t, map[string]string{"a.toml": credentialsFileConfig(secret)})
	first, err := Load(confd)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Pools["platform"].Check.Credentials; got != "YWRtaW46YWRtaW4=" {
		t.Errorf("credentials read from the file: %q, want the file's line without its newline", got)
	}
	if !slices.Contains(first.SecretFiles(), secret) {
		t.Errorf("SecretFiles %q does not list the credentials file: an edit of it would not be watched", first.SecretFiles())
	}

	write("b3BzOm5ldy1wYXNzd29yZA==\n") // ops:new-password
	second, err := Load(confd)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Pools["platform"].Check.Credentials; got != "b3BzOm5ldy1wYXNzd29yZA==" {
		t.Errorf("credentials after the rewrite: %q, want the new ones", got)
	}
	if first.Digest == second.Digest {
		t.Error("the digest did not change with the credentials file: a reload would skip the rotation")
	}
	if strings.Contains(second.Digest, "b3BzOm5ldy1wYXNzd29yZA==") {
		t.Error("the digest holds the credentials themselves")
	}
}

func TestCheckCredentialsFileProblemsNameTheFileAndTheKeyButNeverTheSecret(t *testing.T) {
	dir := t.TempDir()
	f := func(name, body, extra string, want ...string) {
		t.Helper()
		secret := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if body != "" { // "": no file
			if err := os.WriteFile(secret, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, "pools.platform.check.credentials_file: ")
		err := loadFails(t, name, minimalConfig, "[pools.platform.check]\ncredentials_file = \""+secret+"\"\n"+extra, want...)
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "20-bad.toml: pools.platform.check.credentials_file: ") {
			t.Errorf("%s: the problem does not name the file that set the key: %v", name, err)
		}
		for _, s := range []string{"c2VjcmV0", "secret", "bm90LWJhc2U2NCE", "hunter2", "YWRtaW46YWRtaW4="} {
			if strings.Contains(strings.ReplaceAll(err.Error(), dir, ""), s) {
				t.Errorf("%s: the problem shows the credentials (%q): %v", name, s, err)
			}
		}
	}
	f("both keys", "YWRtaW46YWRtaW4=\n", "credentials = \"YWRtaW46YWRtaW4=\"\n", "set with credentials (in ", "set one of them")
	f("missing file", "", "", "no such file or directory")
	f("empty file", "\n", "", "is empty")
	f("not base64", "hunter2!\n", "", "must hold base64 of user:password")
	f("base64 without a colon", "c2VjcmV0\n", "", "must hold base64 of user:password")
}
