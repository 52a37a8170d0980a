package upstream

import (
	"errors"
	"time"
)

// The in-flight failover of a leader pool and its hung-leader watch, on the client's side: the
// exchanges of requests sent with Request.Watch are registered while they wait for their answer's head.
// When the pool has a new leader the proxy calls Abandon on the clients of the other servers: their
// waits that may leave (Request.MayLeave) and have received no byte of an answer end at once with
// ErrAbandoned (their read is cut by moving the socket's read deadline to now; the connection is
// closed), and so do the requests queued for a connection. An answer whose first bytes came just as the
// leader changed is read on. Unanswered tells the proxy that a server looks hung.

// ErrAbandoned ends an attempt whose server was replaced as leader while the request waited, before any
// byte of its answer came (or while it queued for a connection): it goes to the new leader.
var ErrAbandoned = errors.New("the leader changed while the request waited for its answer")

// abandonedWait is handed to a request queued for a connection to a replaced leader (Client.acquire).
var abandonedWait = &upConn{}

// awaitHead registers c's exchange as waiting for its answer's head.
func (u *Client) awaitHead(c *upConn, out *Request) {
	u.waitMu.Lock()
	c.waitIdx, c.waitSince, c.mayLeave, c.abandoned = len(u.awaiting), out.Since, out.MayLeave, false
	u.awaiting = append(u.awaiting, c)
	u.waitMu.Unlock()
}

// headCame ends c's wait for its answer's head: false if it was abandoned meanwhile.
func (u *Client) headCame(c *upConn) bool {
	u.waitMu.Lock()
	last := len(u.awaiting) - 1
	moved := u.awaiting[last]
	u.awaiting[c.waitIdx], moved.waitIdx = moved, c.waitIdx
	u.awaiting[last] = nil
	u.awaiting = u.awaiting[:last]
	c.waitIdx = -1
	abandoned := c.abandoned
	if !abandoned {
		u.lastHead = time.Now().UnixNano()
	}
	u.waitMu.Unlock()
	return !abandoned
}

// resume lets an abandoned connection whose answer had begun be read on: its next read sets a fresh
// deadline.
func (c *upConn) resume() {
	if c.ic != nil {
		c.ic.rDeadline = time.Time{}
	}
}

// abandon cuts short the waits of the requests that may go to another server, and sends the requests
// queued for a connection away: the server is no longer the leader. It returns how many it abandoned.
func (u *Client) Abandon() int {
	n := 0
	u.waitMu.Lock()
	for _, c := range u.awaiting {
		if c.mayLeave && !c.abandoned {
			c.abandoned = true
			c.Conn.SetReadDeadline(time.Now()) //nolint:errcheck // a closed connection fails its read anyway
			n++
		}
	}
	u.waitMu.Unlock()
	u.mu.Lock()
	ws := u.waiters
	u.waiters = nil
	u.mu.Unlock()
	for _, w := range ws {
		w.ch <- abandonedWait
	}
	return n + len(ws)
}

// unanswered reports whether a request has waited at least d for its answer while no answer came for
// at least d: the server looks hung.
func (u *Client) Unanswered(now time.Time, d time.Duration) bool {
	limit := now.Add(-d).UnixNano()
	u.waitMu.Lock()
	defer u.waitMu.Unlock()
	if u.lastHead > limit {
		return false
	}
	for _, c := range u.awaiting {
		if c.waitSince <= limit {
			return true
		}
	}
	return false
}
