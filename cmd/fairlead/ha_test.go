package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// TestTwoProcessesWithTheSameConfigAgreeOnTheLeaderAndOnPlacementThroughAServerFailure: fairlead's own
// HA pair needs no shared state. Two processes with one config (apart from their listen addresses)
// probe on their own, yet name the same leader (admin /api/status), also after the leader stepped
// down, and place 1,000 sticky keys identically: with every connection server up; once both have seen
// one go down (its keys, and only its keys, move, to the same servers through either); and once both
// have seen it come back (the moved keys stay where they went, through either, and new keys use it
// again). They may disagree only while one has seen a change the other has not yet (README.md,
// "fairlead's own HA"); the test compares once both have.
func TestTwoProcessesWithTheSameConfigAgreeOnTheLeaderAndOnPlacementThroughAServerFailure(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 3})
	var ps [2]*proc
	for k := range ps {
		ps[k] = startHAProc(t, c)
	}
	bothSee := func(what string, cond func(p *proc) bool) {
		t.Helper()
		for _, p := range ps {
			p.Eventually(what, func() bool { return cond(p) })
		}
	}

	// The leader: the same, before and after a step-down.
	bothSee("platform1 to lead", func(p *proc) bool { return p.leader() == c.Platforms[0].Addr })
	if err := c.Platforms[0].SetState(sim.Standby); err != nil {
		t.Fatal(err)
	}
	if err := c.Platforms[1].SetState(sim.Leader); err != nil {
		t.Fatal(err)
	}
	bothSee("platform2 to lead", func(p *proc) bool { return p.leader() == c.Platforms[1].Addr })

	// Placement with every connection server up.
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("asset-%04d", i)
	}
	before := placeBoth(t, ps, keys)
	counts := map[string]int{}
	for _, s := range before {
		counts[s]++
	}
	for _, s := range c.Connections {
		if counts[s.Name] < 200 {
			t.Errorf("placement is lopsided: %v", counts)
		}
	}

	// cx2 goes down: once both see it, its keys move, the same way through either, and no other key moves.
	cx2 := c.Connections[1]
	if err := cx2.Kill(); err != nil {
		t.Fatal(err)
	}
	bothSee("cx2 to be down", func(p *proc) bool { return p.available("cxserver", cx2.Addr) == "false" })
	down := placeBoth(t, ps, keys)
	moved := 0
	for _, k := range keys {
		switch {
		case down[k] == cx2.Name:
			t.Fatalf("%s is still placed on cx2, which both see down", k)
		case before[k] == cx2.Name:
			moved++
		case down[k] != before[k]:
			t.Errorf("%s moved from %s to %s, though only cx2 went down", k, before[k], down[k])
		}
	}
	if moved != counts[cx2.Name] {
		t.Errorf("%d keys moved, cx2 had %d", moved, counts[cx2.Name])
	}

	// cx2 comes back: once both see it, the keys stay where they are (the same through either) and new
	// keys are placed over all three again, the same through either.
	if err := cx2.Restart(); err != nil {
		t.Fatal(err)
	}
	bothSee("cx2 to be up", func(p *proc) bool { return p.available("cxserver", cx2.Addr) == "true" })
	up := placeBoth(t, ps, keys)
	for _, k := range keys {
		if up[k] != down[k] {
			t.Errorf("%s moved from %s to %s when cx2 came back", k, down[k], up[k])
		}
	}
	fresh := make([]string, 1000)
	for i := range fresh {
		fresh[i] = fmt.Sprintf("asset-%04d", 1000+i)
	}
	onCx2 := 0
	for _, s := range placeBoth(t, ps, fresh) {
		if s == cx2.Name {
			onCx2++
		}
	}
	if onCx2 < 200 {
		t.Errorf("only %d of 1,000 new keys placed on cx2 once it was back", onCx2)
	}
	t.Logf("1,000 keys: %v with all up; %d moved off cx2 while down, none back; 1,000 new keys, %d on cx2", counts, moved, onCx2)
}

// startHAProc runs fairlead with the connection-server pool (its route first) and the leader pool
// over the cluster, with test-sized checks, and waits until it serves.
func startHAProc(t *testing.T, c *sim.Cluster) *proc {
	t.Helper()
	return &proc{testkit.StartFairlead(t, haFiles(c))}
}

// haFiles is startHAProc's config: a sticky pool over c's connection servers, its WebSocket route first,
// and a leader pool over its first two platforms (all of them, when fewer) with the catch-all route.
func haFiles(c *sim.Cluster) map[string]string {
	var cx testkit.Config
	cx.Table("pools.cxserver").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c))
	names := cx.Table("pools.cxserver.names")
	for _, s := range c.Connections {
		names.Set(s.Addr, s.Name)
	}
	cx.Table("pools.cxserver.sticky").Set("keys", []string{"header:X-Asset-Id"})
	cx.Table("pools.cxserver.check").Set("path", "/health").Set("interval", "200ms").
		Set("fast_interval", "100ms").Set("timeout", "300ms")
	cx.Array("routes").Set("websocket", true).Set("paths", []string{"/Thingworx/WS"}).Set("pool", "cxserver")
	var platform testkit.Config
	platform.Table("pools.platform").Set("servers", testkit.PlatformAddrs(c)[:min(2, len(c.Platforms))])
	platform.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials).Set("interval", "200ms").
		Set("fast_interval", "100ms").Set("timeout", "300ms")
	platform.Array("routes").Set("pool", "platform")
	return map[string]string{"10-cxserver.toml": cx.String(), "20-platform.toml": platform.String()}
}

// haStatus is the part of /api/status these tests read.
type haStatus struct {
	Pools []struct {
		Name    string `json:"name"`
		Leader  string `json:"leader"`
		Servers []struct {
			Addr      string `json:"addr"`
			Available bool   `json:"available"`
		} `json:"servers"`
	} `json:"pools"`
}

func (p *proc) status() haStatus {
	var st haStatus
	resp, err := http.Get("http://" + p.Admin + "/api/status")
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&st) //nolint:errcheck
	return st
}

// leader is the platform pool's leader address ("" while none is known).
func (p *proc) leader() string {
	for _, pool := range p.status().Pools {
		if pool.Name == "platform" {
			return pool.Leader
		}
	}
	return ""
}

// available is "true" or "false" for a server of a pool, "" if unknown.
func (p *proc) available(pool, addr string) string {
	for _, pl := range p.status().Pools {
		if pl.Name != pool {
			continue
		}
		for _, s := range pl.Servers {
			if s.Addr == addr {
				return strconv.FormatBool(s.Available)
			}
		}
	}
	return ""
}

// placeBoth opens (and closes) a tunnel per key through each process and returns key → connection
// server; it fails the test if the two processes place a key differently.
func placeBoth(t *testing.T, ps [2]*proc, keys []string) map[string]string {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	var (
		mu     sync.Mutex
		placed = map[string]string{}
		errs   []string
		wg     sync.WaitGroup
	)
	work := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range work {
				var by [2]string
				var err error
				for k, p := range ps {
					var conn *websocket.Conn
					var resp *http.Response
					conn, resp, err = d.Dial("ws://"+p.Addr+"/Thingworx/WS", http.Header{"X-Asset-Id": {key}})
					if err != nil {
						break
					}
					conn.Close()
					by[k] = resp.Header.Get("X-Served-By")
				}
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, fmt.Sprintf("%s: %v", key, err))
				case by[0] != by[1] || by[0] == "":
					errs = append(errs, fmt.Sprintf("%s: placed on %q by one fairlead and %q by the other", key, by[0], by[1]))
				default:
					placed[key] = by[0]
				}
				mu.Unlock()
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d keys: %s", len(errs), len(keys), strings.Join(errs[:min(len(errs), 5)], "; "))
	}
	return placed
}
