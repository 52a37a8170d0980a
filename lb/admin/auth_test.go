package admin

import (
	"encoding/base64"
	"testing"

	"github.com/fairlead/fairlead/lb/config"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestCredentialsAdmitTheConfiguredTokenOrUserAndPasswordAndNothingElse(t *testing.T) {
	f := func(cfg *config.Config, auth string, want bool) {
		t.Helper()
		if got := credentialsOK([]byte(auth), cfg); got != want {
			t.Errorf("Authorization %q: admitted %v; want %v", auth, got, want)
		}
	}
	token := &config.Config{AdminToken: "s3cret"}
	f(token, "Bearer s3cret", true)
	f(token, "bearer s3cret", true) // the scheme is case-insensitive (RFC 9110 section 11.1)
	f(token, "Bearer  s3cret ", true)
	f(token, "Bearer s3cre", false)
	f(token, "Bearer s3cret2", false)
	f(token, "Bearer ", false)
	f(token, "s3cret", false)
	f(token, "", false)
	f(token, basic("admin", "s3cret"), false) // a token admits no Basic user

	userPass := &config.Config{Admin: config.Admin{User: "admin"}, AdminPassword: "pa:ss"}
	f(userPass, basic("admin", "pa:ss"), true) // the password may hold a colon: the user may not
	f(userPass, "basic "+base64.StdEncoding.EncodeToString([]byte("admin:pa:ss")), true)
	f(userPass, basic("admin", "pa"), false)
	f(userPass, basic("Admin", "pa:ss"), false)
	f(userPass, basic("", "pa:ss"), false)
	f(userPass, "Basic not-base64!", false)
	f(userPass, "Bearer pa:ss", false) // a password admits no bearer

	both := &config.Config{Admin: config.Admin{User: "admin"}, AdminToken: "tok", AdminPassword: "pw"}
	f(both, "Bearer tok", true)
	f(both, basic("admin", "pw"), true)
	f(both, basic("admin", "tok"), false)

	f(&config.Config{}, "Bearer ", false) // nothing configured: no credentials to match
}
