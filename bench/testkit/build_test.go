package testkit

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestABinaryIsBuiltOncePerSourceForEveryTestProcess builds fairlead-sim, then runs this test binary
// again as a child (another package's test process, as go test runs them): the child is handed the same
// file, not a new build.
func TestABinaryIsBuiltOncePerSourceForEveryTestProcess(t *testing.T) {
	bin := Binary(t, "cmd/fairlead-sim")
	if os.Getenv("TESTKIT_BUILD_CHILD") == "1" {
		os.Stdout.WriteString("bin=" + bin + "\n")
		return
	}
	before, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if again := Binary(t, "./cmd/fairlead-sim/"); again != bin {
		t.Fatalf("built again in this process: %s, then %s", bin, again)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestABinaryIsBuiltOncePerSourceForEveryTestProcess$")
	cmd.Env = append(os.Environ(), "TESTKIT_BUILD_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "bin="+bin+"\n") {
		t.Fatalf("the child was handed another binary than %s:\n%s", bin, out)
	}
	after, err := os.Stat(bin)
	if err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the binary was rebuilt by the child (%v)", err)
	}
	if out, err := exec.Command(bin, "-h").CombinedOutput(); !strings.Contains(string(out), "-platforms") {
		t.Fatalf("%s -h: %v\n%s", bin, err, out)
	}
}
