package relay

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

func TestATokenIsRenewedAtFourFifthsOfItsLifeAfterA401AndKeptThroughAnIAMOutage(t *testing.T) {
	clk := &testkit.Clock{}
	const key = "api-key-3b9e"
	iam, err := sim.StartIAM("127.0.0.1:0", sim.IAMOptions{APIKeys: []string{key}, ExpiresIn: 100 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iam.Close)
	ts := NewTokenSource(iam.URL(), key, 5*time.Second, nil)
	ts.now = clk.Now
	defer ts.Close()
	ctx := context.Background()
	token := func() string {
		t.Helper()
		tok, err := ts.Token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !iam.Valid(tok) {
			t.Fatal("the token is not valid at IAM")
		}
		return tok
	}

	first := token()
	clk.Advance(79 * time.Second)
	if token() != first || ts.Status().Issued != 1 {
		t.Fatal("renewed before 80% of its life")
	}
	clk.Advance(2 * time.Second) // 81%
	second := token()
	if second == first || ts.Status().Issued != 2 {
		t.Fatal("not renewed past 80% of its life")
	}
	// The upstream refused it: the next one is new, whatever its age.
	ts.Rejected(second)
	third := token()
	if third == second || ts.Status().Issued != 3 {
		t.Fatal("not renewed after a 401")
	}
	ts.Rejected(second) // a token already replaced: nothing happens
	if token() != third {
		t.Fatal("a stale rejection replaced the current token")
	}

	// IAM down at renewal time: the current token serves until it expires, then the error names IAM
	// and never the key.
	iam.Stop()
	clk.Advance(85 * time.Second)
	if tok, err := ts.Token(ctx); err != nil || tok != third {
		t.Fatalf("during an IAM outage, a still-valid token: %v", err)
	}
	clk.Advance(20 * time.Second)
	_, err = ts.Token(ctx)
	if err == nil || !strings.Contains(err.Error(), "IAM "+iam.URL()+"/identity/token") || strings.Contains(err.Error(), key) {
		t.Fatalf("after expiry with IAM down: %v", err)
	}
	if st := ts.Status(); st.Failures < 2 || st.Expires.IsZero() {
		t.Errorf("status: %+v", st)
	}
}

func TestConcurrentCallersShareOneExchange(t *testing.T) {
	const key = "api-key-77"
	iam, err := sim.StartIAM("127.0.0.1:0", sim.IAMOptions{APIKeys: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iam.Close)
	ts := NewTokenSource(iam.URL(), key, 5*time.Second, nil)
	defer ts.Close()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := ts.Token(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := iam.Stats().Issued; n != 1 {
		t.Errorf("20 concurrent callers cost %d exchanges, want 1", n)
	}
}

func TestAnUnknownAPIKeyIsAnErrorNamingIAMAndItsStatus(t *testing.T) {
	iam, err := sim.StartIAM("127.0.0.1:0", sim.IAMOptions{APIKeys: []string{"the-key"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iam.Close)
	ts := NewTokenSource(iam.URL(), "wrong-key-secret", 5*time.Second, nil)
	defer ts.Close()
	_, err = ts.Token(context.Background())
	if err == nil || !strings.Contains(err.Error(), "status 400") || strings.Contains(err.Error(), "wrong-key-secret") {
		t.Errorf("Token: %v", err)
	}
}
