package soak

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// The load (testkit.Load): GET and POST workers in a closed loop on keep-alive connections, and tunnel
// loops that each open a tunnel as one device, echo a few messages through it and close it, over and
// over.
const (
	getWorkers  = 6
	postWorkers = 3
	tunnelLoops = 300
	// nearEvent: an error this soon after a leader switch or a connection server kill (a mark) is
	// counted as caused by it.
	nearEvent = 10 * time.Second
)

var (
	wsPaths = []string{"/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelClient", "/Thingworx/VWS"}
	// answerSizes and bodySizes are the sizes asked of the platforms and uploaded, with their weights
	// (repeats): mostly small, now and then 1 MiB. 65537 is just over fairlead's retry_buffer.
	answerSizes = []int{-1, -1, -1, -1, -1, -1, 0, 100, 4096, 4096, 16384, 65537, 262144, 1 << 20}
	bodySizes   = []int{0, 100, 100, 1024, 4096, 4096, 16384, 65536, 65537, 262144, 1 << 20}
	payload     = func() []byte {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		return b
	}()
)

// startLoad puts the load on fairlead at addr for d; the test marks its events (Mark), reads the
// counts (Snapshot) and the failures by reason (Errors), and stops it once Done.
func startLoad(addr string, d time.Duration) *testkit.Load {
	return testkit.StartLoad(testkit.LoadOptions{
		Addr: addr, Workers: getWorkers + postWorkers, Duration: d, Discard: true, NearMark: nearEvent,
		Timeout:         30 * time.Second,
		IdleConnTimeout: 3 * time.Second, // below fairlead's idle_timeout: never reuse a connection it closes
		Request: func(w, n int) testkit.Request {
			if w < getWorkers {
				return get(w, n)
			}
			return post(w-getWorkers, n)
		},
		Tunnels: testkit.TunnelOptions{
			Count:   tunnelLoops,
			Ramp:    10 * time.Millisecond, // 3 s
			Timeout: 10 * time.Second,
			Path:    func(i int) string { return wsPaths[i%len(wsPaths)] },
			Asset:   func(i int) string { return fmt.Sprintf("soak-device-%d", i) },
			// 1–10 messages of 16 B–2 KiB with pauses of 0.1–1 s, then closed (one time in five by
			// dropping the connection without a close frame).
			Echoes:  func() int { return 1 + rand.IntN(10) },
			Message: func() []byte { return payload[:16+rand.IntN(2033)] },
			Pause:   func() time.Duration { return testkit.Jitter(100*time.Millisecond, time.Second) },
			Drop:    func() bool { return rand.IntN(5) == 0 },
			Redial:  func() time.Duration { return testkit.Jitter(200*time.Millisecond, 500*time.Millisecond) },
		},
	})
}

// get asks for an answer of a random size (plain or chunked), checking its length.
func get(i, n int) testkit.Request {
	size := answerSizes[rand.IntN(len(answerSizes))]
	path := fmt.Sprintf("/Thingworx/Things/soak-%d/Properties/p%d", i, n)
	if size >= 0 {
		path += "?bytes=" + strconv.Itoa(size)
		if rand.IntN(2) == 0 {
			path += "&chunked=1"
		}
	}
	return testkit.Request{Method: http.MethodGet, Path: path, Check: func(a testkit.Answer) error {
		if size >= 0 && a.Bytes != int64(size) {
			return fmt.Errorf("GET %d bytes: got %d", size, a.Bytes)
		}
		return nil
	}}
}

// post uploads a body of a random size (with a length or chunked), checking that all of it arrived.
func post(i, n int) testkit.Request {
	size := bodySizes[rand.IntN(len(bodySizes))]
	chunked := rand.IntN(2) == 0
	return testkit.Request{Method: http.MethodPost, Path: fmt.Sprintf("/Thingworx/Things/soak-%d/Services/Upload%d", i, n),
		Body: payload[:size], Chunked: chunked, Check: func(a testkit.Answer) error {
			// The simulator counts only bodies it reads: none for Content-Length: 0.
			if got := a.Header("X-Body-Bytes"); got != strconv.Itoa(size) && !(size == 0 && got == "") {
				return fmt.Errorf("POST %d bytes (chunked %v): X-Body-Bytes %q", size, chunked, got)
			}
			return nil
		}}
}
