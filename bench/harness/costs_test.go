package harness

import (
	"os"
	"strings"
	"testing"
)

func TestParseCtxSwitches(t *testing.T) {
	f := func(status string, want ctxSwitchCount, wantOK bool) {
		t.Helper()
		got, ok := parseCtxSwitches(status)
		if got != want || ok != wantOK {
			t.Errorf("parseCtxSwitches(%q) = %+v, %v; want %+v, %v", status, got, ok, want, wantOK)
		}
	}
	// The tail of a real /proc/PID/task/TID/status.
	f(`Name:	haproxy
Umask:	0022
State:	S (sleeping)
Tgid:	4242
Pid:	4243
Threads:	2
Cpus_allowed_list:	0
Mems_allowed_list:	0
voluntary_ctxt_switches:	150
nonvoluntary_ctxt_switches:	545
`, ctxSwitchCount{voluntary: 150, nonvoluntary: 545}, true)
	f("voluntary_ctxt_switches:\t0\nnonvoluntary_ctxt_switches:\t0", ctxSwitchCount{}, true)
	f("voluntary_ctxt_switches:\t7\n", ctxSwitchCount{voluntary: 7}, false)
	f("voluntary_ctxt_switches:\tmany\nnonvoluntary_ctxt_switches:\t1\n", ctxSwitchCount{}, false)
	f("", ctxSwitchCount{}, false)
}

func TestCtxSwitchesSumsEveryThread(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc")
	}
	main, ok := parseCtxSwitches(string(b))
	if !ok {
		t.Fatalf("no context switches in /proc/self/status:\n%s", b)
	}
	// A Go test binary runs several threads; their sum is at least what the main thread did.
	all := ctxSwitches(os.Getpid())
	if all.voluntary < main.voluntary || all.nonvoluntary < main.nonvoluntary || all.voluntary+all.nonvoluntary == 0 {
		t.Errorf("every thread: %+v, main thread: %+v", all, main)
	}
}

func TestCostsTableShowsContextSwitchesForEveryPeer(t *testing.T) {
	costsScenario := costsScenarios[0]
	rep := &Report{Plan: QuickPlan(), Scenarios: []string{costsScenario}, Costs: true, Strace: "/usr/bin/strace"}
	for _, p := range []struct {
		peer      string
		vol, invl float64
	}{{"fairlead", 1.25, 0.5}, {"haproxy", 0.75, 0.25}} {
		rep.Results = append(rep.Results, &Result{Scenario: costsScenario, Peer: p.peer, Round: 1, Metrics: map[string]float64{
			"req_s": 1000, costCPU: 30, costCtxSw: p.vol + p.invl, costCtxVol: p.vol, costCtxInvol: p.invl,
		}})
	}
	rep.summarize([]*scenario{httpSmallScenario()})
	var md strings.Builder
	rep.writeCosts(&md)
	out := md.String()
	for _, want := range []string{
		"| context switches / request | 1.750 | 1.000 |",
		"| voluntary switches / request | 1.250 | 0.750 |",
		"| nonvoluntary switches / request | 0.500 | 0.250 |",
		"- **context switches / request**: voluntary + nonvoluntary context switches of every thread",
		"- **voluntary switches / request**: ",
		"- **nonvoluntary switches / request**: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("costs table lacks %q:\n%s", want, out)
		}
	}
}
