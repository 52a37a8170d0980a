package main

// fairlead-sim cert: a certificate for the demo's HTTPS listener, made at run time (no key is ever
// committed), so that `make run` needs no openssl.

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fairlead/fairlead/bench/sim"
)

const certUsage = `usage: fairlead-sim cert -dir DIR [-name demo] [NAME ...]

Writes a new certificate for the NAMEs (DNS names or IP addresses; default 127.0.0.1 and localhost),
valid for a day, as DIR/NAME.crt and its key as DIR/NAME.key (mode 0600), issued by a new CA written as
DIR/NAME-ca.crt (for a client that verifies: curl --cacert). Prints the three paths.

`

// runCert runs the cert mode: 0 when the files are written, 1 when they cannot be, 2 for bad flags.
func runCert(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fairlead-sim cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, certUsage); fs.PrintDefaults() }
	dir := fs.String("dir", "", "the directory the files go into (it must exist)")
	name := fs.String("name", "demo", "the files' base name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || *name == "" {
		fmt.Fprintln(stderr, "fairlead-sim cert: -dir and -name must not be empty")
		return 2
	}
	names := fs.Args()
	if len(names) == 0 {
		names = []string{"127.0.0.1", "localhost"}
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "fairlead-sim cert: %s\n", err)
		return 1
	}
	ca, err := sim.NewCA("fairlead demo CA")
	if err != nil {
		return fail(err)
	}
	leaf, err := ca.Issue(names...)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Stat(*dir); err != nil {
		return fail(err)
	}
	certFile, keyFile, err := leaf.Write(*dir, *name)
	if err != nil {
		return fail(err)
	}
	caFile, err := ca.WriteCA(*dir, *name+"-ca")
	if err != nil {
		return fail(err)
	}
	fmt.Fprintln(stdout, certFile)
	fmt.Fprintln(stdout, keyFile)
	fmt.Fprintln(stdout, caFile)
	return 0
}
