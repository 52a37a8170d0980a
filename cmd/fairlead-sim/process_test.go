package main

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

// runSim starts fairlead-sim (testkit.Binary) with args (killed when the test ends) and returns the
// process and the lines of its startup summary, up to and including the "control …" line.
func runSim(t *testing.T, args ...string) (*exec.Cmd, []string) {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t, "cmd/fairlead-sim"), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) //nolint:errcheck
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "control ") {
			break
		}
	}
	return cmd, lines
}
