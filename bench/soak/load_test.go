package soak

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

// The load: GET and POST workers on keep-alive connections, and tunnel loops that each open a tunnel
// as one device, echo a few messages through it and close it, over and over.
const (
	getWorkers  = 6
	postWorkers = 3
	tunnelLoops = 300
	// nearEvent: an error this soon after a leader switch or a connection server kill is counted as
	// caused by it.
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

type load struct {
	addr   string
	client *http.Client

	gets, posts, tunnels, echoes         atomic.Uint64
	httpErrors, dialErrors, tunnelErrors atomic.Uint64
	nearEvents                           atomic.Uint64 // errors of any kind soon after an event
	openTunnels                          atomic.Int64
	lastEvent                            atomic.Int64 // unix ns of the latest event
	errMu                                sync.Mutex
	errs                                 map[string]*errCount // by reason: "POST 503", "GET failed", "tunnel broken", …
}

func newLoad(addr string) *load {
	return &load{
		addr: addr,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: getWorkers + postWorkers,
			IdleConnTimeout:     3 * time.Second, // below fairlead's idle_timeout: never reuse a connection it closes
			DisableCompression:  true,
		}},
		errs: map[string]*errCount{},
	}
}

// run puts the load on for d.
func (l *load) run(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l.loop(ctx)
}

// loop puts the load on until ctx ends, then closes every connection it holds.
func (l *load) loop(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range getWorkers {
		wg.Go(func() { l.getLoop(ctx, i) })
	}
	for i := range postWorkers {
		wg.Go(func() { l.postLoop(ctx, i) })
	}
	for i := range tunnelLoops {
		wg.Go(func() {
			if sleep(ctx, time.Duration(i)*10*time.Millisecond) { // a ramp of 3 s
				l.tunnelLoop(ctx, i)
			}
		})
	}
	wg.Wait()
	l.client.CloseIdleConnections()
}

// event marks a disruption, so that the errors right after it are counted as caused by it.
func (l *load) event() { l.lastEvent.Store(time.Now().UnixNano()) }

// errCount is how often one reason of failure was seen, and its first error.
type errCount struct {
	n     int
	first string
}

func (l *load) fail(counter *atomic.Uint64, reason string, err error) {
	counter.Add(1)
	if time.Now().UnixNano()-l.lastEvent.Load() < int64(nearEvent) {
		l.nearEvents.Add(1)
	}
	l.errMu.Lock()
	defer l.errMu.Unlock()
	e := l.errs[reason]
	if e == nil {
		e = &errCount{first: err.Error()}
		l.errs[reason] = e
	}
	e.n++
}

// httpFailure is the reason of a failed request: its method and the status, or "failed" when no
// status came (or a 200 was wrong).
func httpFailure(method string, err error) string {
	var se *statusError
	if errors.As(err, &se) {
		return method + " " + strconv.Itoa(se.code)
	}
	return method + " failed"
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// errorReport lists the failures by reason, most frequent first, each with its first error.
func (l *load) errorReport() []string {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	reasons := make([]string, 0, len(l.errs))
	for r := range l.errs {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Or(l.errs[b].n-l.errs[a].n, strings.Compare(a, b)) })
	var lines []string
	for _, r := range reasons {
		lines = append(lines, fmt.Sprintf("%d × %s (first: %s)", l.errs[r].n, r, l.errs[r].first))
	}
	return lines
}

func (l *load) getLoop(ctx context.Context, i int) {
	for n := 0; ctx.Err() == nil; n++ {
		size := answerSizes[rand.IntN(len(answerSizes))]
		url := fmt.Sprintf("http://%s/Thingworx/Things/soak-%d/Properties/p%d", l.addr, i, n)
		if size >= 0 {
			url += "?bytes=" + strconv.Itoa(size)
			if rand.IntN(2) == 0 {
				url += "&chunked=1"
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		err := l.do(req, func(resp *http.Response, body int64) error {
			if size >= 0 && body != int64(size) {
				return fmt.Errorf("GET %d bytes: got %d", size, body)
			}
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.fail(&l.httpErrors, httpFailure(req.Method, err), err)
			continue
		}
		l.gets.Add(1)
	}
}

func (l *load) postLoop(ctx context.Context, i int) {
	for n := 0; ctx.Err() == nil; n++ {
		size := bodySizes[rand.IntN(len(bodySizes))]
		url := fmt.Sprintf("http://%s/Thingworx/Things/soak-%d/Services/Upload%d", l.addr, i, n)
		var body io.Reader = bytes.NewReader(payload[:size])
		chunked := rand.IntN(2) == 0
		if chunked {
			body = io.MultiReader(body) // no length known: net/http sends it chunked
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
		req.Header.Set("Content-Type", "application/octet-stream")
		if chunked {
			req.ContentLength = -1
		}
		err := l.do(req, func(resp *http.Response, _ int64) error {
			// The simulator counts only bodies it reads: none for Content-Length: 0.
			if got := resp.Header.Get("X-Body-Bytes"); got != strconv.Itoa(size) && !(size == 0 && got == "") {
				return fmt.Errorf("POST %d bytes (chunked %v): X-Body-Bytes %q", size, chunked, got)
			}
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.fail(&l.httpErrors, httpFailure(req.Method, err), err)
			continue
		}
		l.posts.Add(1)
	}
}

// do sends req and reads the whole answer, which must be 200 and pass check (given the body length).
func (l *load) do(req *http.Request, check func(*http.Response, int64) error) error {
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.StatusCode, fmt.Sprintf("%s %s: %s", req.Method, req.URL.Path, resp.Status)}
	}
	return check(resp, n)
}

// tunnelLoop is one device: it opens a tunnel with its asset id, echoes 1–10 messages of 16 B–2 KiB
// with pauses of 0.1–1 s, closes it (one time in five by dropping the connection without a close
// frame) and starts again.
func (l *load) tunnelLoop(ctx context.Context, i int) {
	asset := fmt.Sprintf("soak-device-%d", i)
	for ctx.Err() == nil {
		ws, err := dialTunnelPath(l.addr, wsPaths[i%len(wsPaths)], asset)
		if err != nil {
			if ctx.Err() == nil {
				l.fail(&l.dialErrors, "tunnel dial", err)
				sleep(ctx, time.Duration(200+rand.IntN(300))*time.Millisecond)
			}
			continue
		}
		l.tunnels.Add(1)
		l.openTunnels.Add(1)
		for range 1 + rand.IntN(10) {
			if err := echo(ws, payload[:16+rand.IntN(2033)]); err != nil {
				if ctx.Err() == nil {
					l.fail(&l.tunnelErrors, "tunnel broken", err)
				}
				break
			}
			l.echoes.Add(1)
			if !sleep(ctx, time.Duration(100+rand.IntN(900))*time.Millisecond) {
				break
			}
		}
		if rand.IntN(5) != 0 {
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
				time.Now().Add(time.Second))
		}
		ws.Close()
		l.openTunnels.Add(-1)
	}
}

// snapshot is the load's counters at one time.
type snapshot struct {
	requests, gets, posts, tunnels, echoes           uint64
	httpErrors, dialErrors, tunnelErrors, nearEvents uint64
	openTunnels                                      int64
}

func (s snapshot) errors() uint64 { return s.httpErrors + s.dialErrors + s.tunnelErrors }

func (l *load) snapshot() snapshot {
	s := snapshot{gets: l.gets.Load(), posts: l.posts.Load(), tunnels: l.tunnels.Load(), echoes: l.echoes.Load(),
		httpErrors: l.httpErrors.Load(), nearEvents: l.nearEvents.Load(),
		dialErrors: l.dialErrors.Load(), tunnelErrors: l.tunnelErrors.Load(), openTunnels: l.openTunnels.Load()}
	s.requests = s.gets + s.posts
	return s
}

// sleep waits d or until ctx ends; it reports whether the whole wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func dialTunnel(addr, asset string) (*websocket.Conn, error) {
	return dialTunnelPath(addr, wsPaths[0], asset)
}

// dialTunnelPath opens a WebSocket through fairlead at addr on path, as device asset.
func dialTunnelPath(addr, path, asset string) (*websocket.Conn, error) {
	d := websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   4096,
		WriteBufferSize:  4096,
		NetDial: func(network, a string) (net.Conn, error) {
			return net.DialTimeout(network, a, 5*time.Second)
		},
	}
	ws, resp, err := d.Dial("ws://"+addr+path, http.Header{"X-Asset-Id": {asset}})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil && resp != nil {
		return nil, fmt.Errorf("%w (status %d)", err, resp.StatusCode)
	}
	return ws, err
}

// echo sends msg and waits for the same message back.
func echo(ws *websocket.Conn, msg []byte) error {
	deadline := time.Now().Add(10 * time.Second)
	_ = ws.SetWriteDeadline(deadline)
	if err := ws.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		return err
	}
	_ = ws.SetReadDeadline(deadline)
	_, got, err := ws.ReadMessage()
	if err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("the echo differs from the message")
	}
	return nil
}
