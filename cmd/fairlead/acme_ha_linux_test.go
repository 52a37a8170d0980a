package main

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// An HA pair shares storage: one instance obtains the certificate, the other loads it, and either
// answers a challenge the other started (pebble reaches only the first one's listeners).
func TestACMEHAPairSharesStorageAndObtainsOnce(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	listen, tlsAddr, pb := acmeSetup(t, true, true, 0)
	storage := t.TempDir()
	const name = "twx.fairlead.test"
	// b starts first and takes the storage's lock; pebble validates on a's listeners only.
	bListen, bTLS := testkit.Addr(t), testkit.Addr(t)
	bAdmin, aAdmin := testkit.Addr(t), testkit.Addr(t)
	bDir := testkit.WriteFiles(t, map[string]string{"10-acme.toml": acmeConfig(t, c, bListen, bTLS, bAdmin, "", pb, storage, nil, name)})
	aDir := testkit.WriteFiles(t, map[string]string{"10-acme.toml": acmeConfig(t, c, listen, tlsAddr, aAdmin, "", pb, storage, nil, name)})
	b := &acmeProc{Fairlead: testkit.RunFairlead(t, bDir, bListen, bAdmin), t: t, listen: bListen, tlsAddr: bTLS, pebble: pb, storage: storage}
	testkit.Eventually(t, "b to take the storage's lock for "+name, 10*time.Second, func() bool {
		locks, _ := filepath.Glob(filepath.Join(storage, "locks", "*.lock"))
		return len(locks) > 0
	})
	// b waits, holding the lock, until a serves (the lock stays fresh for 10 s): pebble then finds a
	// to answer b's challenge, however long a takes to start on a loaded machine.
	if err := b.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	a := &acmeProc{Fairlead: testkit.RunFairlead(t, aDir, listen, aAdmin), t: t, listen: listen, tlsAddr: tlsAddr, pebble: pb, storage: storage}
	a.WaitServing()
	if err := b.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	b.WaitServing()
	ca, cb := a.waitACME(name)[0], b.waitACME(name)[0]
	if ca.SerialNumber.Cmp(cb.SerialNumber) != 0 {
		t.Errorf("the pair serves two certificates (%x, %x); want the one in shared storage", ca.SerialNumber, cb.SerialNumber)
	}
	if n := pb.IssuedFor(name); n != 1 {
		t.Errorf("pebble issued %d certificates for %s, want 1 for the pair", n, name)
	}
	oa, ob := a.metric(`fairlead_acme_certificates_total{renewal="false",result="ok"}`), b.metric(`fairlead_acme_certificates_total{renewal="false",result="ok"}`)
	if oa != 0 || ob != 1 {
		t.Errorf("obtained by a %d, by b %d; want by b, which held the lock", oa, ob)
	}
	// b started the challenge, pebble reached a: a answered it from the shared storage.
	answered := a.metric(`fairlead_acme_challenges_answered_total{type="http-01"}`) + a.metric(`fairlead_acme_challenges_answered_total{type="tls-alpn-01"}`)
	if answered < 1 {
		t.Errorf("a answered %d challenges; pebble reaches only a", answered)
	}
}
