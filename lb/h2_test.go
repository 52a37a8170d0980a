package lb

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// HTTP/2 on the TLS listener (lb/frontend/h2.go).

// h2Client is a client that speaks HTTP/2 only, over one connection (StrictMaxConcurrentStreams: it
// waits for a stream rather than open another connection).
func h2Client(env *tlsEnv) (*http.Client, *http2.Transport) {
	tr := &http2.Transport{TLSClientConfig: env.clientConfig(tlsName), StrictMaxConcurrentStreams: true}
	return &http.Client{Timeout: 60 * time.Second, Transport: tr}, tr
}

func TestH2AGoClientOfferingH2GetsHTTP2ThroughTLSListenToTheLeader(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c, l, tlsAddr, _ := tlsPlatformLB(t, cert, "")

	// net/http's own client, told to try HTTP/2, as browsers do by default.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: env.clientConfig(tlsName), ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + tlsAddr + "/echo-headers")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("answered over %s (ALPN %q), want HTTP/2.0 (h2)", resp.Proto, resp.TLS.NegotiatedProtocol)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != c.Platforms[0].Name {
		t.Fatalf("%d from %q, want 200 from the leader %s", resp.StatusCode, resp.Header.Get("X-Served-By"), c.Platforms[0].Name)
	}
	// The leader got an HTTP/1.1 request with the authority as Host and X-Forwarded-Proto: https.
	seen := hostileEchoed(body)
	if got := seen["x-forwarded-proto"]; len(got) != 1 || got[0] != "https" {
		t.Errorf("the leader saw X-Forwarded-Proto %q, want [https]", got)
	}
	if got := resp.Header.Get("X-Echo-Host"); got != tlsAddr {
		t.Errorf("the leader saw Host %q, want the :authority %q", got, tlsAddr)
	}
	if n := l.h2.Counts().Streams; n != 1 {
		t.Errorf("%d HTTP/2 streams counted, want 1", n)
	}

	// A client that offers http/1.1 only is still served HTTP/1.1 on the same listener.
	cfg := env.clientConfig(tlsName)
	cfg.NextProtos = []string{"http/1.1"}
	r := tlsRequest(tlsAddr, cfg, "/", nil)
	if r.status != 200 || r.state.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("an HTTP/1.1-only client: %v (ALPN %q), want 200 over http/1.1", r, r.state.NegotiatedProtocol)
	}
}

// 200 concurrent streams on one connection, GETs of answers of various sizes and POSTs of bodies with
// and without a length, all reach the leader and come back intact.
func TestH2TwoHundredConcurrentStreamsOnOneConnectionReachTheLeaderIntact(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c, l, tlsAddr, _ := tlsPlatformLB(t, cert, "")
	client, tr := h2Client(env)
	defer tr.CloseIdleConnections()

	const n = 200
	if err := h2Exchange(client, tlsAddr, 0, c.Platforms[0].Name); err != nil { // the server's SETTINGS known
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h2Exchange(client, tlsAddr, i, c.Platforms[0].Name)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := l.h2.Counts(); got.Conns != 1 || got.Streams != n+1 {
		t.Errorf("%d connections and %d streams, want 1 and %d", got.Conns, got.Streams, n)
	}
}

// h2Exchange makes request i: even ones GET an answer of i*517 bytes, odd ones POST i*1031 random bytes
// (every fourth without a length, as a stream of unknown size), and checks what comes back.
func h2Exchange(client *http.Client, addr string, i int, leader string) error {
	var req *http.Request
	var sum string
	var size int
	if i%2 == 0 {
		size = i * 517
		req, _ = http.NewRequest("GET", "https://"+addr+"/Thingworx/Things?bytes="+strconv.Itoa(size), nil)
	} else {
		size = i * 1031
		body := make([]byte, size)
		rand.Read(body) //nolint:errcheck
		h := sha256.Sum256(body)
		sum = hex.EncodeToString(h[:])
		var rd io.Reader = bytes.NewReader(body)
		if i%4 == 3 {
			rd = io.MultiReader(rd) // no length known to the client: no content-length sent
		}
		req, _ = http.NewRequest("POST", "https://"+addr+"/Thingworx/Services/Upload", rd)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("request %d: %v", i, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("request %d: reading the answer: %v", i, err)
	}
	switch {
	case resp.Proto != "HTTP/2.0":
		return fmt.Errorf("request %d over %s", i, resp.Proto)
	case resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != leader:
		return fmt.Errorf("request %d: %d from %q, want 200 from %s", i, resp.StatusCode, resp.Header.Get("X-Served-By"), leader)
	case i%2 == 0 && (len(got) != size || size > 0 && (got[0] != 'a' || got[size-1] != byte('a'+(size-1)%26))):
		return fmt.Errorf("request %d: a %d-byte answer, want %d bytes of the pattern", i, len(got), size)
	case i%2 == 1 && (resp.Header.Get("X-Body-Bytes") != strconv.Itoa(size) || resp.Header.Get("X-Body-Sha256") != sum):
		return fmt.Errorf("request %d: the leader read %s bytes (sha256 %.8s…), want %d (%.8s…)", i, resp.Header.Get("X-Body-Bytes"), resp.Header.Get("X-Body-Sha256"), size, sum)
	}
	return nil
}
