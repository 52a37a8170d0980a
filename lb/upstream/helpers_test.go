package upstream

import (
	"errors"
	"net"

	"github.com/valyala/fasthttp"
)

// isTimeout reports a read or write that timed out (the proxy's classification of a timeout).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &ne) && ne.Timeout()
}
