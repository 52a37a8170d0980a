package testkit

import (
	"io"
	"net/http"
	"testing"
)

// Do sends method url with body (nil for none) and header pairs (name, value, ...) through client and
// returns the answer with its whole body (the response's Body is read and closed). Any failure to send
// or to read fails the test.
func Do(t testing.TB, client *http.Client, method, url string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, b
}
