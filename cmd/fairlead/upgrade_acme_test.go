//go:build linux

package main

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// A binary upgrade: the new process serves the certificate the old one obtained, from storage, without
// asking the ACME server again.
func TestSIGUSR2ServesTheACMECertificateWithoutAskingAgain(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	_, tlsAddr, pb := acmeSetup(t, false, true, 0)
	const name = "twx.fairlead.test"
	var conf testkit.Config
	conf.Table("frontend").Set("tls_listen", tlsAddr)
	conf.Table("frontend.acme").Set("directory", pb.DirectoryURL).Set("ca_root", pb.ServerCAFile()).
		Set("storage", t.TempDir()).Set("domains", []string{name})
	u := startUpgradable(t, c, "20-acme.toml", conf.String())
	p := &acmeProc{t: t, tlsAddr: tlsAddr, pebble: pb}
	first := p.waitACME(name)[0]
	orders, old := pb.Orders(), u.pid()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return u.pid() != old && gone(old) })
	if got := p.acmeLeaf(name); got == nil || got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("after the upgrade: not the certificate obtained before")
	}
	if pb.Orders() != orders {
		t.Errorf("the new process asked the ACME server again (%d orders → %d)", orders, pb.Orders())
	}
	if got := testkit.Metric(u.admin, `fairlead_acme_certificates_total{renewal="false",result="ok"}`); got != "0" {
		t.Errorf("the new process counts %s certificates obtained, want 0 (loaded from storage)", got)
	}
	if got := testkit.Metric(u.admin, `fairlead_tls_certificate_not_after_seconds{acme="`+name+`"}`); got != strconv.FormatInt(first.NotAfter.Unix(), 10) {
		t.Errorf("the new process's expiry gauge: %s, want %d", got, first.NotAfter.Unix())
	}
}
