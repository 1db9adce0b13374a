package llm

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// MaxResponseBytes bounds a response body read from a model server: a
// broken or hostile server cannot make a worker buffer without limit.
const MaxResponseBytes = 16 << 20

// ErrResponseTooLarge is the error of a response body over
// MaxResponseBytes; it is final, not retried.
var ErrResponseTooLarge = fmt.Errorf("the response is over %d MiB", MaxResponseBytes>>20)

// HTTPClient returns a client making c's requests (a fresh client when c is
// nil) whose response bodies are bounded by MaxResponseBytes.
func HTTPClient(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	}
	next := out.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out.Transport = bounded{next: next}
	return &out
}

type bounded struct{ next http.RoundTripper }

func (b bounded) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := b.next.RoundTrip(req)
	if err == nil && res.Body != nil {
		res.Body = &limitedBody{rc: res.Body, left: MaxResponseBytes}
	}
	return res, err
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer
		// one.
		var one [1]byte
		if n, _ := l.rc.Read(one[:]); n > 0 {
			return 0, ErrResponseTooLarge
		}
		return l.rc.Read(p)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }

// isFinal reports errors no retry can help.
func isFinal(err error) bool {
	return errors.Is(err, ErrRequest) || errors.Is(err, ErrResponseTooLarge)
}
