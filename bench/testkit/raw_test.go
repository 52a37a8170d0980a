package testkit

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestARawConnKeepsTheBytesOfEachAnswerAsTheyCame(t *testing.T) {
	const first, second = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 204 No Content\r\n\r\n"
	s := StartRawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := ReadHead(br); err != nil {
			return
		}
		io.WriteString(c, first+second) //nolint:errcheck
	})
	c := DialRaw(t, s.Addr, 5*time.Second)
	if err := c.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	head, err := ReadHead(c.R)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 2)
	if _, err := io.ReadFull(c.R, body); err != nil {
		t.Fatal(err)
	}
	if got := string(c.Take()); got != first || head+string(body) != first {
		t.Fatalf("took %q (head %q, body %q), want %q", got, head, body, first)
	}
	if _, err := ReadHead(c.R); err != nil {
		t.Fatal(err)
	}
	if got := string(c.Take()); got != second {
		t.Fatalf("took %q, want %q", got, second)
	}
	if s.Accepted() != 1 {
		t.Fatalf("accepted %d connections, want 1", s.Accepted())
	}
}

func TestARawConnTellsAClosedConnectionFromAnOpenOne(t *testing.T) {
	hold := make(chan struct{})
	s := StartRawServer(t, func(c net.Conn) {
		if _, err := ReadHead(bufio.NewReader(c)); err != nil {
			return
		}
		<-hold // a connection that sent a head is held until the end of the test
	})
	defer close(hold)
	closing := DialRaw(t, s.Addr, 5*time.Second)
	if err := closing.Send("no head, then the server closes: ", time.Second); err != nil {
		t.Fatal(err)
	}
	closing.Conn.(*net.TCPConn).CloseWrite() //nolint:errcheck // the server reads EOF before a head and returns
	if closed, instead := closing.ClosedWithin(5 * time.Second); !closed {
		t.Fatalf("a connection the server closed: not closed, %s", instead)
	}
	open := DialRaw(t, s.Addr, 5*time.Second)
	if err := open.Send("GET / HTTP/1.1\r\n\r\n", time.Second); err != nil {
		t.Fatal(err)
	}
	if closed, instead := open.ClosedWithin(50 * time.Millisecond); closed || !strings.Contains(instead, "timeout") {
		t.Fatalf("a connection the server holds: closed %v, %q; want open with a timeout", closed, instead)
	}
}

func TestReadHeadSkipsEmptyLinesBeforeTheStartLine(t *testing.T) {
	br := bufio.NewReader(strings.NewReader("\r\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\nrest"))
	head, err := ReadHead(br)
	if err != nil || head != "GET / HTTP/1.1\r\nHost: x\r\n\r\n" {
		t.Fatalf("head %q, %v", head, err)
	}
	if rest, _ := io.ReadAll(br); string(rest) != "rest" {
		t.Fatalf("left %q after the head, want %q", rest, "rest")
	}
}

func TestARawServerClosesItsConnectionsAndWaitsForItsHandlers(t *testing.T) {
	returned := make(chan struct{})
	s := StartRawServer(t, func(c net.Conn) {
		defer close(returned)
		io.Copy(io.Discard, c) //nolint:errcheck // until the server closes c
	})
	c := DialRaw(t, s.Addr, 5*time.Second)
	Eventually(t, "the connection to be accepted", 5*time.Second, func() bool { return s.Accepted() == 1 })
	s.Close()
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the handler did")
	}
	if closed, instead := c.ClosedWithin(5 * time.Second); !closed {
		t.Fatalf("the client's connection after Close: %s", instead)
	}
}
