package healthcheck

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// prober sends the probes of one server: GET <Path> with the Basic credentials, bounded by Timeout.
// Both the leader check and the rise/fall checker use it; it is used by one goroutine at a time.
type prober struct {
	addr    string // where probes go (host:port)
	path    string
	auth    string // "Basic <credentials>", or "" for none
	timeout time.Duration
	client  *fasthttp.HostClient
}

func newProber(addr string, p *Probe) *prober {
	pr := &prober{addr: addr, path: p.Path, timeout: p.Timeout}
	if p.Credentials != "" {
		pr.auth = "Basic " + p.Credentials
	}
	timeout := p.Timeout
	pr.client = &fasthttp.HostClient{
		Addr:                addr,
		Name:                "fairlead-check",
		MaxConns:            2,
		ReadTimeout:         timeout,
		WriteTimeout:        timeout,
		MaxIdleConnDuration: p.IntervalMax + time.Second,
		Dial:                func(a string) (net.Conn, error) { return fasthttp.DialTimeout(a, timeout) },
	}
	return pr
}

// get sends one probe and returns the answer's status, or 0 and the error (a timeout included).
func (pr *prober) get() (int, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(pr.path)
	req.Header.SetHost(pr.addr)
	req.Header.SetMethod(fasthttp.MethodGet)
	if pr.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, pr.auth)
	}
	resp.SkipBody = true
	if err := pr.client.DoTimeout(req, resp, pr.timeout); err != nil {
		return 0, err
	}
	return resp.StatusCode(), nil
}
