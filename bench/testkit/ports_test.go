package testkit

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestFreePortsAreDistinctBindableAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		a := Addr(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		_, p, _ := net.SplitHostPort(a)
		if n, _ := strconv.Atoi(p); n >= 32768 {
			t.Fatalf("%s is in the ephemeral range", a)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		ln.Close()
	}
}

// TestAnotherProcessIsNotHandedAPortThisOneHolds runs this test binary again as a child that hands out
// ports while this process holds 300: none of the child's may be one of them.
func TestAnotherProcessIsNotHandedAPortThisOneHolds(t *testing.T) {
	if os.Getenv("TESTKIT_CHILD") == "1" {
		for range 300 {
			os.Stdout.WriteString(Addr(t) + "\n")
		}
		return
	}
	mine := map[string]bool{}
	for range 300 {
		mine[Addr(t)] = true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAnotherProcessIsNotHandedAPortThisOneHolds$")
	cmd.Env = append(os.Environ(), "TESTKIT_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	n := 0
	for _, a := range strings.Fields(string(out)) {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			continue
		}
		n++
		if mine[a] {
			t.Fatalf("the child was handed %s, which this process holds", a)
		}
	}
	if n != 300 {
		t.Fatalf("the child handed out %d ports, want 300", n)
	}
}

func TestFreePortsAreConsecutiveAndNotHandedOutAgain(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		base, err := FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		for p := base; p < base+3; p++ {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("%d: %v", p, err)
			}
			ln.Close()
		}
	}
	for range 50 {
		p, err := FreePort()
		if err != nil || seen[p] {
			t.Fatalf("FreePort handed out %d (%v), one of FreePorts'", p, err)
		}
	}
}
