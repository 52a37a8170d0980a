package admin

// Who may read and act on the admin listener (auth.go), over real sockets: a Handler over a
// testBackend, whose record of Act calls says whether an action reached the load balancer. What an
// action does to a server, and that a reload reads the secrets again, are package lb's tests.

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/lb/config"
)

const (
	cx1 = "127.0.0.1:9001"
	cx2 = "127.0.0.1:9002"
)

func TestAdminTokenIsNeededForActionsButNotForReadingOnLoopback(t *testing.T) {
	const token = "t0ken-Xy9-s3cret"
	e := startAdmin(t, newTestBackend(&config.Config{Admin: config.Admin{Listen: "127.0.0.1:8404"}, AdminToken: token}), Options{})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+token))
	for _, auth := range []string{"", "Bearer wrong", "Bearer ", "Bearer " + token + "x", "Bearer " + token[:len(token)-1],
		basic, token, "Token " + token} {
		code, h, body := e.do(t, http.MethodPost, "/api/servers/platform/"+cx1+"/maint", auth)
		if code != 401 {
			t.Fatalf("POST maint with Authorization %q: %d %s, want 401", auth, code, body)
		}
		if wa := h.Get("WWW-Authenticate"); !strings.HasPrefix(wa, "Bearer") {
			t.Errorf("POST with Authorization %q: WWW-Authenticate %q, want a Bearer challenge", auth, wa)
		}
		if strings.Contains(string(body), token) {
			t.Errorf("the 401 shows the token: %s", body)
		}
	}
	// Nothing was done: no action reached the load balancer.
	if acts := e.b.actions(); len(acts) != 0 {
		t.Fatalf("refused actions reached the backend: %+v", acts)
	}
	if n := e.h.Unauthorized(); n != 8 { // one per refused POST (fairlead_admin_unauthorized_total)
		t.Errorf("%d requests counted unauthorized, want 8", n)
	}
	// Reading needs no credentials on a loopback listener.
	for _, path := range []string{"/api/status", "/status", "/metrics", "/healthz", "/"} {
		if code, _, body := e.do(t, http.MethodGet, path, ""); code != 200 {
			t.Errorf("GET %s without credentials: %d %s, want 200", path, code, body)
		}
	}
	// The right token is obeyed.
	if ss := e.mustAction(t, "platform", cx1, "drain", "Bearer "+token); ss.Addr != cx1 || ss.AdminState != "drain" || ss.Available {
		t.Fatalf("the answer to drain: %s, admin_state %q, available %v", ss.Addr, ss.AdminState, ss.Available)
	}
	if acts := e.b.actions(); !slices.Equal(acts, []testAct{{pool: "platform", server: cx1, action: Drain, by: "127.0.0.1"}}) {
		t.Fatalf("the backend was asked %+v, want one drain of %s by 127.0.0.1", acts, cx1)
	}
}

func TestAdminBasicUserAndPassword(t *testing.T) {
	const password = "pa55-W0rd-zz"
	e := startAdmin(t, newTestBackend(&config.Config{Admin: config.Admin{Listen: "127.0.0.1:8404", User: "ops"}, AdminPassword: password}), Options{})
	b := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, auth := range []string{"", b("ops", "wrong"), b("ops", password+"x"), b("root", password), b("", password),
		b("ops", ""), "Bearer " + password, "Basic not-base64!"} {
		code, h, body := e.do(t, http.MethodPost, "/api/servers/platform/"+cx2+"/drain", auth)
		if code != 401 {
			t.Fatalf("POST drain with Authorization %q: %d %s, want 401", auth, code, body)
		}
		if wa := h.Get("WWW-Authenticate"); !strings.HasPrefix(wa, "Basic") {
			t.Errorf("POST with Authorization %q: WWW-Authenticate %q, want a Basic challenge", auth, wa)
		}
	}
	if acts := e.b.actions(); len(acts) != 0 {
		t.Fatalf("refused actions reached the backend: %+v", acts)
	}
	if ss := e.mustAction(t, "platform", cx2, "drain", b("ops", password)); ss.AdminState != "drain" || ss.Available {
		t.Fatalf("the answer to drain: admin_state %q, available %v", ss.AdminState, ss.Available)
	}
	if acts := e.b.actions(); len(acts) != 1 || acts[0].server != cx2 || acts[0].action != Drain {
		t.Fatalf("the backend was asked %+v, want one drain of %s", acts, cx2)
	}
}

// The listener's address is the config's (config validation refuses a non-loopback one without
// credentials); the test serves on 127.0.0.1 all the same.
func TestANonLoopbackAdminListenerNeedsCredentialsForEveryPath(t *testing.T) {
	const token = "wide-open-T0k"
	e := startAdmin(t, newTestBackend(&config.Config{Admin: config.Admin{Listen: "0.0.0.0:0"}, AdminToken: token}), Options{})
	for _, path := range []string{"/api/status", "/status", "/metrics", "/healthz", "/", "/events", "/debug/pprof/", "/nope"} {
		for _, auth := range []string{"", "Bearer nope"} {
			if code, _, body := e.do(t, http.MethodGet, path, auth); code != 401 {
				t.Errorf("GET %s with Authorization %q: %d %s, want 401", path, auth, code, body)
			}
		}
	}
	for _, path := range []string{"/api/status", "/metrics", "/healthz", "/"} {
		if code, _, body := e.do(t, http.MethodGet, path, "Bearer "+token); code != 200 {
			t.Errorf("GET %s with the token: %d %s, want 200", path, code, body)
		}
	}
	if code, _, body := e.do(t, http.MethodPost, "/api/servers/platform/"+cx1+"/drain", ""); code != 401 {
		t.Errorf("POST drain without the token: %d %s", code, body)
	}
	if code, _, body := e.do(t, http.MethodPost, "/api/servers/platform/"+cx1+"/drain", "Bearer "+token); code != 200 {
		t.Errorf("POST drain with the token: %d %s", code, body)
	}
	if acts := e.b.actions(); len(acts) != 1 {
		t.Errorf("%d actions reached the backend, want 1: %+v", len(acts), acts)
	}
}
