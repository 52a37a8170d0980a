package testkit

import "time"

// PollInterval is how often Eventually and Within look at their condition.
const PollInterval = 10 * time.Millisecond

// Eventually polls cond every PollInterval until it holds, and fails the test if timeout passes first,
// naming what it waited for. The timeout bounds a hang: make it generous (seconds), never a measure of
// speed — on a busy shared machine an asynchronous effect may take many times its usual delay.
func Eventually(t TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Within polls cond every PollInterval until it holds (true) or timeout passes (false); cond is called
// at least once.
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(PollInterval)
	}
	return true
}
