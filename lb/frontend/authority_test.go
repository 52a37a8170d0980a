package frontend

import "testing"

func TestValidAuthorityIsHostAndPortWithoutUserinfo(t *testing.T) {
	f := func(a string, want bool) {
		t.Helper()
		if got := ValidAuthority(a); got != want {
			t.Errorf("ValidAuthority(%q) = %v, want %v", a, got, want)
		}
	}
	for _, a := range []string{"example.com", "example.com:8443", "EXAMPLE.com:0", "127.0.0.1", "127.0.0.1:65535",
		"[::1]", "[::1]:443", "[2001:db8::1]:80", "a-b.c_d~e", "host:", "x!$&'()*+,;=y"} {
		f(a, true)
	}
	for _, a := range []string{"", ":80", "a b", "a/b?c", "user@evil.example", "u:p@h", "[::1", "[::1]x", "[::1]:x",
		"a:b:c", "a:99999", "a:123456", "[fe80::1%25eth0]", "[127.0.0.1]", "[v1.x]", "x%41y", "a\\b", "a#b", "é.example", "a\x00b"} {
		f(a, false)
	}
}

func TestAuthorityHostDropsThePortAndOneTrailingDot(t *testing.T) {
	for a, want := range map[string]string{
		"example.com": "example.com", "Example.COM:8443": "Example.COM", "example.com.": "example.com",
		"example.com.:80": "example.com", "127.0.0.1:1": "127.0.0.1", "[::1]": "[::1]", "[2001:db8::1]:443": "[2001:db8::1]",
		"host:": "host", ".": ".", "": "",
	} {
		if got := string(AuthorityHost([]byte(a))); got != want {
			t.Errorf("AuthorityHost(%q) = %q, want %q", a, got, want)
		}
	}
	b := []byte("twx.example.com:443")
	if n := testing.AllocsPerRun(100, func() { AuthorityHost(b) }); n != 0 {
		t.Errorf("AuthorityHost allocates %v times", n)
	}
}
