package sim

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// maxProbes bounds the probe history a platform keeps; older probes are
// dropped first.
const maxProbes = 10000

// copyBufSize is the buffer size used to stream request bodies.
const copyBufSize = 32 << 10

// Probe is one LeaderCheck request received by a platform server.
type Probe struct {
	// At is when the probe reached the handler.
	At time.Time
	// Authorization is the raw Authorization header value ("" if absent).
	Authorization string
	// Status is the status answered, or 0 if the probe got no answer
	// because the platform was Hung.
	Status int
}

// Platform is a simulated ThingWorx platform (Foundation) server.
//
// It answers the LeaderCheck probe according to its State and serves ordinary
// requests; see State for what each state does. Every answer carries
// "X-Served-By: <Name>". Ordinary requests understand these query
// parameters on any path:
//
//	status=N     answer with status N (200-599)
//	delay=D      sleep D (a Go duration, e.g. 250ms) before answering
//	bytes=N      answer with an N-byte body, byte i being 'a'+i%26, streamed
//	             with a Content-Length (add chunked=1 for chunked encoding)
//	trailers=1   with bytes=N&chunked=1: end the chunked body with the trailer
//	             field "X-Checksum: <hex SHA-256 of the body>"
//
// A request body of any size is read as a stream; the answer then carries
// "X-Body-Bytes: <count>" and "X-Body-Sha256: <hex>", and when the body was
// chunked and ended with trailer fields, "X-Echo-Trailers: <fields>", each
// "name: value" as received, separated by "; ". The path /echo-headers
// answers with the request headers as the body, one "Name: value" per line in
// the order received, plus an "X-Echo-Host: <Host>" header.
//
// A WebSocket upgrade on the path /Thingworx/WS (where ThingWorx accepts
// edge connections) is upgraded by a Leader or Backup platform, the 101
// carrying "X-Served-By: <Name>", and every message is echoed back with the
// same type, as a connection server does; a Standby platform answers it 503
// like any ordinary request. The tunnel lasts until either side closes it
// or the platform goes Dead, whatever other state changes happen meanwhile.
// An upgrade counts as an ordinary request in Requests.
//
// SetLeaderCheckHung makes only the LeaderCheck hang, as in Hung, while
// ordinary requests are served by the state (a leader whose HA check is
// stuck but whose application still answers). SetDelay makes every answer
// late (a slow node), SetLeaderCheckFlap makes the LeaderCheck alternate
// 503 and 200, and with Options.DeliveryHeader the platform records which
// requests reached it (Deliveries); see faults.go.
//
// All methods are safe for concurrent use.
type Platform struct {
	// Name is "platform1", "platform2", ...
	Name string
	// Addr is the host:port the server listens on; it does not change when
	// the server goes Dead and comes back.
	Addr string

	srv  *netServer
	logf func(format string, args ...any)

	servedBy        []byte
	auth            []byte // "Basic <credentials>"
	leaderCheckPath []byte
	body            []byte

	// stateMu serializes state transitions; state is read lock-free.
	stateMu sync.Mutex
	state   atomic.Int32
	forced  atomic.Int32
	// checkHung makes LeaderCheck probes hang whatever the state.
	checkHung atomic.Bool
	// delay (a time.Duration) delays every answer; flap alternates LeaderCheck answers, flapN counting
	// them (faults.go).
	delay atomic.Int64
	flap  atomic.Bool
	flapN atomic.Int64

	delivery *deliveries // nil without Options.DeliveryHeader

	requests atomic.Int64

	upgrader websocket.FastHTTPUpgrader
	upgrades atomic.Int64
	tunnels  atomic.Int64

	bufPool sync.Pool // *[]byte of copyBufSize, for streaming request bodies

	probesMu sync.Mutex
	probes   []Probe
}

func newPlatform(name, addr string, st State, opts *Options, log *lineLog) (*Platform, error) {
	p := &Platform{
		Name:            name,
		logf:            opts.Logf,
		delivery:        newDeliveries(opts, log),
		servedBy:        []byte(name),
		auth:            []byte("Basic " + opts.Credentials),
		leaderCheckPath: []byte(opts.LeaderCheckPath),
		body:            opts.Body,
		upgrader: websocket.FastHTTPUpgrader{
			CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
		},
	}
	if p.body == nil {
		p.body = []byte("hello from " + name + "\n")
	}
	p.state.Store(int32(st))
	srv, err := newNetServer(addr, opts.TLS, p.newServer, p.logf)
	if err != nil {
		return nil, fmt.Errorf("platform %s: %w", name, err)
	}
	p.srv = srv
	p.Addr = srv.addr
	return p, nil
}

func (p *Platform) newServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      p.handle,
		Name:                         "fairlead-sim",
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadBufferSize:               16 << 10,
		Logger:                       fasthttpLogger{prefix: p.Name + ": ", logf: p.logf},
	}
}

// SetState moves the platform to s. Going Dead closes the listener and all
// open connections; leaving Dead listens again on Addr (retrying briefly
// while the port is still busy). On a listen error the platform stays Dead
// and the error is returned.
func (p *Platform) SetState(s State) error {
	if !s.valid() {
		return fmt.Errorf("sim: invalid state %d", int(s))
	}
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	old := State(p.state.Load())
	if old == s {
		return nil
	}
	switch {
	case s == Dead:
		p.state.Store(int32(Dead))
		p.srv.stop()
	case old == Dead:
		if err := p.srv.start(); err != nil {
			return fmt.Errorf("platform %s: %w", p.Name, err)
		}
		p.state.Store(int32(s))
	default:
		p.state.Store(int32(s))
	}
	p.logf("%s: %s -> %s", p.Name, old, s)
	return nil
}

// State returns the current state.
func (p *Platform) State() State {
	return State(p.state.Load())
}

// SetLeaderCheckStatus forces the status answered to LeaderCheck probes that
// carry the right credentials (e.g. 400, 401, 503), whatever the state; code
// 0 goes back to the state-derived answer. Probes without the right
// credentials still get 401, and Hung or Dead platforms still do not answer.
func (p *Platform) SetLeaderCheckStatus(code int) {
	p.forced.Store(int32(code))
}

// SetLeaderCheckHung makes LeaderCheck probes hang (true) as they do in
// Hung, recorded in Probes with status 0, whatever the state and the forced
// status; ordinary requests are still served by the state. false goes back
// to answering them. A probe that hung stays hung until its connection
// closes.
func (p *Platform) SetLeaderCheckHung(hung bool) {
	p.checkHung.Store(hung)
}

// LeaderCheckStatus returns the forced LeaderCheck status, 0 if none.
func (p *Platform) LeaderCheckStatus() int {
	return int(p.forced.Load())
}

// Requests returns the number of ordinary (non-LeaderCheck) requests that
// reached the handler since the start or the last ResetCounters, whatever
// they were answered, including those that hung.
func (p *Platform) Requests() int64 {
	return p.requests.Load()
}

// Probes returns a copy of the LeaderCheck probes received, oldest first
// (at most the latest 10000).
func (p *Platform) Probes() []Probe {
	p.probesMu.Lock()
	defer p.probesMu.Unlock()
	return append([]Probe(nil), p.probes...)
}

// Upgrades returns the number of successful WebSocket upgrades so far (see
// Platform). It is incremented before the 101 response is sent.
func (p *Platform) Upgrades() int64 {
	return p.upgrades.Load()
}

// OpenTunnels returns the number of currently open WebSocket connections to
// the platform. A tunnel counts from just after the 101 is written until its
// connection closes.
func (p *Platform) OpenTunnels() int {
	return int(p.tunnels.Load())
}

// ResetCounters zeroes Requests and forgets the recorded Probes and
// Deliveries.
func (p *Platform) ResetCounters() {
	p.requests.Store(0)
	p.delivery.reset()
	p.probesMu.Lock()
	p.probes = nil
	p.probesMu.Unlock()
}

// OpenConns returns the number of currently open TCP connections to the
// server, including hung ones.
func (p *Platform) OpenConns() int {
	return p.srv.openConns()
}

func (p *Platform) close() {
	p.srv.close()
}

func (p *Platform) recordProbe(at time.Time, auth []byte, status int) {
	pr := Probe{At: at, Authorization: string(auth), Status: status}
	p.probesMu.Lock()
	if len(p.probes) >= maxProbes {
		n := copy(p.probes, p.probes[len(p.probes)-maxProbes/2:])
		p.probes = p.probes[:n]
	}
	p.probes = append(p.probes, pr)
	p.probesMu.Unlock()
}

var (
	hdrServedBy       = []byte("X-Served-By")
	hdrBodyBytes      = []byte("X-Body-Bytes")
	hdrBodySha256     = []byte("X-Body-Sha256")
	hdrEchoHost       = []byte("X-Echo-Host")
	hdrEchoTrailers   = []byte("X-Echo-Trailers")
	hdrChecksum       = []byte("X-Checksum")
	hdrWWWAuth        = []byte("WWW-Authenticate")
	valWWWAuth        = []byte(`Basic realm="ThingWorx"`)
	pathEchoHeaders   = []byte("/echo-headers")
	pathWS            = []byte("/Thingworx/WS")
	textPlain         = []byte("text/plain; charset=utf-8")
	bodyLeader        = []byte("leader\n")
	bodyNotLeader     = []byte("not leader\n")
	bodyUnauthorized  = []byte("unauthorized\n")
	bodyStandby       = []byte("standby\n")
	bytesPatternBlock = makePattern(64 << 10)
)

// makePattern returns a block of at least n bytes whose byte i is 'a'+i%26;
// its length is a multiple of 26 so consecutive copies continue the pattern.
func makePattern(n int) []byte {
	n = (n + 25) / 26 * 26
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

func (p *Platform) handle(ctx *fasthttp.RequestCtx) {
	st := State(p.state.Load())
	if bytes.Equal(ctx.Path(), p.leaderCheckPath) {
		p.leaderCheck(ctx, st)
		return
	}
	p.requests.Add(1)
	p.delivery.record(p.Name, ctx)
	switch st {
	case Hung:
		hang(ctx)
		return
	case Dead:
		drop(ctx)
		return
	}
	if !p.delayAnswer() {
		drop(ctx)
		return
	}
	ctx.Response.Header.SetBytesKV(hdrServedBy, p.servedBy)
	ctx.SetContentTypeBytes(textPlain)
	if st == Standby {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBody(bodyStandby)
		return
	}
	if bytes.Equal(ctx.Path(), pathWS) && websocket.FastHTTPIsWebSocketUpgrade(ctx) {
		p.upgrade(ctx)
		return
	}

	// -1 is chunked; -2 ("until close") is not a request body.
	if cl := ctx.Request.Header.ContentLength(); cl > 0 || cl == -1 {
		if !p.readBody(ctx) {
			return
		}
	}

	status := fasthttp.StatusOK
	var nbytes int64 = -1
	chunked := false
	if args := ctx.QueryArgs(); args.Len() > 0 {
		if v := args.Peek("status"); len(v) > 0 {
			n, err := strconv.Atoi(string(v))
			if err != nil || n < 200 || n > 599 {
				badRequest(ctx, "bad status parameter %q", v)
				return
			}
			status = n
		}
		var ok bool
		if nbytes, ok = delayAndBytes(ctx, p.sleep); !ok {
			return
		}
		chunked = args.Has("chunked") && string(args.Peek("chunked")) != "0"
	}

	ctx.SetStatusCode(status)
	switch {
	case bytes.Equal(ctx.Path(), pathEchoHeaders):
		echoHeaders(ctx)
	case nbytes >= 0 && chunked && ctx.QueryArgs().Has("trailers"):
		// Set before the body is written (fasthttp writes the head meanwhile): the pattern is known.
		h := sha256.New()
		writePattern(h, nbytes)
		ctx.Response.Header.AddTrailerBytes(hdrChecksum) //nolint:errcheck // a valid name
		ctx.Response.Header.SetBytesK(hdrChecksum, hex.EncodeToString(h.Sum(nil)))
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			writePattern(w, nbytes)
		})
	case nbytes >= 0 && chunked:
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			writePattern(w, nbytes)
		})
	case nbytes >= 0:
		ctx.SetBodyStream(&patternReader{left: nbytes}, int(nbytes))
	default:
		ctx.SetBody(p.body)
	}
}

// upgrade answers a WebSocket upgrade with a 101 and echoes the messages.
func (p *Platform) upgrade(ctx *fasthttp.RequestCtx) {
	if err := p.upgrader.Upgrade(ctx, func(c *websocket.Conn) { echoMessages(c, &p.tunnels) }); err != nil {
		p.logf("%s: upgrade failed: %s", p.Name, err)
		return
	}
	p.upgrades.Add(1)
}

func (p *Platform) leaderCheck(ctx *fasthttp.RequestCtx, st State) {
	at := time.Now()
	auth := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	switch {
	case st == Hung || p.checkHung.Load() && st != Dead:
		p.recordProbe(at, auth, 0)
		hang(ctx)
		return
	case st == Dead:
		drop(ctx)
		return
	}
	if !p.delayAnswer() {
		drop(ctx)
		return
	}
	ctx.Response.Header.SetBytesKV(hdrServedBy, p.servedBy)
	ctx.SetContentTypeBytes(textPlain)
	var status int
	switch {
	case !bytes.Equal(auth, p.auth):
		status = fasthttp.StatusUnauthorized
		ctx.Response.Header.SetBytesKV(hdrWWWAuth, valWWWAuth)
		ctx.SetBody(bodyUnauthorized)
	case p.forced.Load() != 0:
		status = int(p.forced.Load())
		if status == fasthttp.StatusUnauthorized {
			ctx.Response.Header.SetBytesKV(hdrWWWAuth, valWWWAuth)
		}
		ctx.SetBodyString(fasthttp.StatusMessage(status) + "\n")
	case p.flap.Load():
		status = p.flapStatus()
		if status == fasthttp.StatusOK {
			ctx.SetBody(bodyLeader)
		} else {
			ctx.SetBody(bodyNotLeader)
		}
	case st == Leader:
		status = fasthttp.StatusOK
		ctx.SetBody(bodyLeader)
	default:
		status = fasthttp.StatusServiceUnavailable
		ctx.SetBody(bodyNotLeader)
	}
	ctx.SetStatusCode(status)
	p.recordProbe(at, auth, status)
}

// sleep waits d or until the server stops (goes Dead or the cluster
// closes); it reports whether d elapsed.
func (p *Platform) sleep(d time.Duration) bool {
	return sleepUnlessStopped(d, p.srv.stopping())
}

// sleepUnlessStopped waits d or until stop is closed; it reports whether d
// elapsed.
// delayAndBytes applies a request's ?delay=D, waiting with sleep (false: the server stopped meanwhile,
// and the connection is dropped), and returns its ?bytes=N (-1 without one). ok is false when the
// request was answered (a bad parameter) or dropped.
func delayAndBytes(ctx *fasthttp.RequestCtx, sleep func(time.Duration) bool) (nbytes int64, ok bool) {
	args := ctx.QueryArgs()
	if v := args.Peek("delay"); len(v) > 0 {
		d, err := time.ParseDuration(string(v))
		if err != nil {
			badRequest(ctx, "bad delay parameter %q", v)
			return -1, false
		}
		if !sleep(d) {
			drop(ctx)
			return -1, false
		}
	}
	nbytes = -1
	if v := args.Peek("bytes"); len(v) > 0 {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			badRequest(ctx, "bad bytes parameter %q", v)
			return -1, false
		}
		nbytes = n
	}
	return nbytes, true
}

func sleepUnlessStopped(d time.Duration, stop <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// readBody streams the request body through SHA-256 and sets the
// X-Body-Bytes and X-Body-Sha256 response headers. On a read error it
// answers 400, closes the connection and returns false.
func (p *Platform) readBody(ctx *fasthttp.RequestCtx) bool {
	bp, _ := p.bufPool.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, copyBufSize)
		bp = &b
	}
	h := sha256.New()
	var n int64
	var err error
	if r := ctx.RequestBodyStream(); r != nil {
		n, err = io.CopyBuffer(h, r, *bp)
	}
	p.bufPool.Put(bp)
	if err != nil {
		ctx.SetConnectionClose()
		badRequest(ctx, "cannot read request body after %d bytes: %s", n, err)
		return false
	}
	var sum [sha256.Size]byte
	ctx.Response.Header.SetBytesK(hdrBodyBytes, strconv.FormatInt(n, 10))
	ctx.Response.Header.SetBytesK(hdrBodySha256, hex.EncodeToString(h.Sum(sum[:0])))
	if t := ctx.Request.Header.TrailerHeader(); len(t) > 2 {
		fields := strings.ReplaceAll(strings.TrimSuffix(string(t), "\r\n\r\n"), "\r\n", "; ")
		ctx.Response.Header.SetBytesK(hdrEchoTrailers, fields)
	}
	return true
}

func badRequest(ctx *fasthttp.RequestCtx, format string, args ...any) {
	ctx.SetStatusCode(fasthttp.StatusBadRequest)
	ctx.SetBodyString(fmt.Sprintf(format, args...) + "\n")
}

// hang takes the connection over without answering and reads and discards
// its input until it is closed, by the peer or by the server going Dead.
func hang(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
	})
}

// drop closes the connection without answering.
func drop(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

// echoHeaders answers with the request headers, one "Name: value" per
// line in the order received.
func echoHeaders(ctx *fasthttp.RequestCtx) {
	var out []byte
	for k, v := range ctx.Request.Header.AllInOrder() {
		out = append(out, k...)
		out = append(out, ": "...)
		out = append(out, v...)
		out = append(out, '\n')
	}
	ctx.Response.Header.SetBytesKV(hdrEchoHost, ctx.Request.Header.Host())
	ctx.SetBody(out)
}

// patternReader produces left bytes of the 'a'+i%26 pattern.
type patternReader struct {
	left int64
	off  int
}

func (r *patternReader) Read(b []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > r.left {
		b = b[:r.left]
	}
	n := 0
	for n < len(b) {
		c := copy(b[n:], bytesPatternBlock[r.off:])
		n += c
		r.off = (r.off + c) % len(bytesPatternBlock)
	}
	r.left -= int64(n)
	return n, nil
}

func writePattern(w io.Writer, n int64) {
	for n > 0 {
		chunk := bytesPatternBlock
		if int64(len(chunk)) > n {
			chunk = chunk[:n]
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
		n -= int64(len(chunk))
	}
	if f, ok := w.(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
}
