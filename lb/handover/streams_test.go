//go:build unix

package handover

import (
	"bytes"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection, and the file of the accepted end.
func tcpPair(t *testing.T) (client net.Conn, accepted *os.File) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close() // the file is a descriptor of its own
	f, err := a.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	return client, f
}

// Streams pass with what they were sent and their sockets, which the taker writes on where the
// giver stopped; one receive loop takes tunnels and streams in any order until done.
func TestStreamsPassWithTheirSocketsBesideTunnels(t *testing.T) {
	a, b := channels(t)
	sseClient, sseFile := tcpPair(t)
	wsClient, wsFile := tcpPair(t)
	_, tFile := tcpPair(t)
	_, tsFile := tcpPair(t)
	opened := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	want := []Stream{
		{Relay: "appconfig", Topic: "inventory/dev", Kind: "sse", Version: 7, Started: true, Client: "127.0.0.1:1", Opened: opened, File: sseFile},
		{Relay: "appconfig", Topic: "inventory/prod", Kind: "websocket", Version: 3, Seed: true, Sum: bytes.Repeat([]byte{0xab}, 32), Client: "127.0.0.1:2", Opened: opened, File: wsFile},
	}
	sent := make(chan error, 1)
	go func() {
		if err := SendStreams(a, want[:1]); err != nil {
			sent <- err
			return
		}
		if err := SendTunnels(a, []Tunnel{{Pool: "cx", Server: "s:1", Client: "198.51.100.9:3", ProxyLocal: true, ClientFile: tFile, ServerFile: tsFile}}); err != nil {
			sent <- err
			return
		}
		if err := SendStreams(a, want[1:]); err != nil {
			sent <- err
			return
		}
		sent <- Done(a)
	}()
	var got []Stream
	var tunnels []Tunnel
	if err := Receive(b, Adopter{Tunnel: func(t Tunnel) { tunnels = append(tunnels, t) }, Stream: func(s Stream) { got = append(got, s) }}); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{sseFile, wsFile, tFile, tsFile} {
		f.Close() // the giver's: the sockets live on in the taker's descriptors
	}
	if len(got) != 2 || len(tunnels) != 1 {
		t.Fatalf("%d streams and %d tunnels, want 2 and 1", len(got), len(tunnels))
	}
	tunnels[0].ClientFile.Close()
	tunnels[0].ServerFile.Close()
	if tn := tunnels[0]; tn.Pool != "cx" || tn.Server != "s:1" || tn.Client != "198.51.100.9:3" || !tn.ProxyLocal {
		t.Errorf("the tunnel: %s, %s, client %s, LOCAL %v; want cx, s:1, 198.51.100.9:3, true", tn.Pool, tn.Server, tn.Client, tn.ProxyLocal)
	}
	for i, s := range got {
		w := want[i]
		if s.Relay != w.Relay || s.Topic != w.Topic || s.Kind != w.Kind || s.Version != w.Version || s.Seed != w.Seed ||
			!bytes.Equal(s.Sum, w.Sum) || s.Started != w.Started || s.Client != w.Client || !s.Opened.Equal(w.Opened) || s.File == nil {
			t.Errorf("stream %d: %+v, want %+v", i, s, w)
		}
	}
	// The taker writes on each stream's socket: its client reads it on the connection it had.
	for i, peer := range []net.Conn{sseClient, wsClient} {
		c, err := net.FileConn(got[i].File)
		got[i].File.Close()
		if err != nil {
			t.Fatal(err)
		}
		msg := "id: 8\nevent: snapshot\ndata: {}\n\n"
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		peer.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		b, err := io.ReadAll(peer)
		if err != nil || string(b) != msg {
			t.Errorf("stream %d's client read %q, %v; want %q, then the end", i, b, err, msg)
		}
	}
}

// A kind the taker has no function for is refused, its sockets closed (the client sees the end),
// and what follows is still taken; Receive says so at done.
func TestStreamsToATakerOfTunnelsAloneAreClosed(t *testing.T) {
	a, b := channels(t)
	client, file := tcpPair(t)
	tClient, tFile := tcpPair(t)
	_, tsFile := tcpPair(t)
	go func() {
		SendStreams(a, []Stream{{Relay: "r", Topic: "a/b", Kind: "sse", File: file}})                //nolint:errcheck
		SendTunnels(a, []Tunnel{{Pool: "cx", Server: "s:1", ClientFile: tFile, ServerFile: tsFile}}) //nolint:errcheck
		Done(a)                                                                                      //nolint:errcheck
	}()
	var tunnels []Tunnel
	err := ReceiveTunnels(b, func(t Tunnel) { tunnels = append(tunnels, t) })
	if err == nil || !strings.Contains(err.Error(), "streams refused") {
		t.Errorf("Receive: %v, want the streams refused", err)
	}
	if len(tunnels) != 1 {
		t.Fatalf("%d tunnels taken after the refused streams, want 1", len(tunnels))
	}
	file.Close()
	tFile.Close()
	tsFile.Close()
	client.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("the refused stream's client read %d bytes, %v; want the end", n, err)
	}
	// The tunnel's socket is open in the taker.
	tunnels[0].ServerFile.Close()
	c, err := net.FileConn(tunnels[0].ClientFile)
	tunnels[0].ClientFile.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	tClient.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := io.ReadFull(tClient, make([]byte, 1)); err != nil {
		t.Errorf("the tunnel's client: %v", err)
	}
}
