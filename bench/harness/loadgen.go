package harness

import (
	"fmt"
	"net/http"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// The benchmark's loads are testkit's: its closed loop on raw connections (testkit.ClosedLoop, where
// wrk is missing or a scenario needs per-request detail) and its paced load (testkit.Load), here on
// raw connections too.

// startPaced sends GETs of path at about rate req/s spread over workers raw keep-alive connections until
// Stop (or maxDur passes), as the failover and reload scenarios need. A worker whose request is held
// longer than its slot skips the missed slots, so a stall lowers the rate rather than piling requests
// up afterwards.
func startPaced(addr string, workers, rate int, maxDur time.Duration, path string) *testkit.Load {
	return testkit.StartLoad(testkit.LoadOptions{Addr: addr, Workers: workers, Rate: rate, Raw: true, Duration: maxDur,
		Request: func(int, int) testkit.Request { return testkit.Request{Method: http.MethodGet, Path: path} }})
}

// pacedSummary counts a set of samples.
type pacedSummary struct {
	Sent, OK, Failed, Retried int
	FirstErr                  string
}

func summarize(ss []testkit.Sample) pacedSummary {
	var p pacedSummary
	for _, s := range ss {
		p.Sent++
		if s.Retried {
			p.Retried++
		}
		if s.OK() {
			p.OK++
			continue
		}
		p.Failed++
		if p.FirstErr == "" {
			if s.Err != nil {
				p.FirstErr = s.Err.Error()
			} else {
				p.FirstErr = fmt.Sprintf("status %d", s.Status)
			}
		}
	}
	return p
}
