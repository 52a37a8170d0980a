package relay

// IAM tokens for a relay that speaks App Configuration: the IBM Cloud API key is exchanged at the IAM
// service for an access token, which every upstream fetch, events session and metering POST carries as
// "Authorization: Bearer …". One token serves the whole relay; it is renewed when 80% of its life has
// passed (as IBM's own SDK cores do) and at once after the upstream refused it with 401. Neither the
// key nor a token is ever logged, put into an error or shown.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// iamMaxBody bounds an IAM answer read.
const iamMaxBody = 1 << 20

// A TokenSource exchanges an API key for IAM access tokens and keeps the current one. Safe for
// concurrent use; concurrent callers that need a new token share one exchange.
type TokenSource struct {
	url    string // {iam_url}/identity/token
	form   string // the exchange's body: holds the API key
	client *http.Client
	now    func() time.Time

	issued   atomic.Uint64 // tokens obtained
	failures atomic.Uint64 // exchanges that failed

	mu       sync.Mutex
	token    string    // the current token ("" for none)
	expires  time.Time // when it expires
	renew    time.Time // when it is renewed (80% of its life)
	inflight chan struct{}
	err      error // the last exchange's error, for the callers that waited on it
}

// NewTokenSource returns a source of tokens for apiKey from the IAM service at iamURL ("https://iam.cloud.ibm.com"),
// whose exchanges time out after timeout. tlsConfig, if set, is used to reach IAM (tests); nil means
// the system's roots.
func NewTokenSource(iamURL, apiKey string, timeout time.Duration, tlsConfig *tls.Config) *TokenSource {
	tr := &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConns: 2, IdleConnTimeout: time.Minute, ForceAttemptHTTP2: false}
	form := url.Values{"grant_type": {"urn:ibm:params:oauth:grant-type:apikey"}, "apikey": {apiKey},
		"response_type": {"cloud_iam"}}
	return &TokenSource{url: strings.TrimSuffix(iamURL, "/") + "/identity/token", form: form.Encode(),
		client: &http.Client{Transport: tr, Timeout: timeout}, now: time.Now}
}

// Token returns a valid token, exchanging the API key for a new one when there is none or the
// current one is due for renewal.
func (ts *TokenSource) Token(ctx context.Context) (string, error) {
	for {
		ts.mu.Lock()
		if ts.token != "" && ts.now().Before(ts.renew) {
			t := ts.token
			ts.mu.Unlock()
			return t, nil
		}
		if ts.inflight != nil {
			wait := ts.inflight
			ts.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			ts.mu.Lock()
			t, err := ts.token, ts.err
			valid := t != "" && ts.now().Before(ts.expires)
			ts.mu.Unlock()
			if valid {
				return t, nil
			}
			if err != nil {
				return "", err
			}
			continue
		}
		done := make(chan struct{})
		ts.inflight = done
		ts.mu.Unlock()
		t, expires, err := ts.exchange(ctx)
		ts.mu.Lock()
		ts.inflight, ts.err = nil, err
		if err == nil {
			now := ts.now()
			ts.token, ts.expires = t, expires
			ts.renew = now.Add(expires.Sub(now) * 8 / 10)
			ts.issued.Add(1)
		} else {
			ts.failures.Add(1)
		}
		close(done)
		ts.mu.Unlock()
		if err != nil {
			// A token still valid serves until it expires, so that an IAM outage during a renewal
			// does not stop the relay.
			ts.mu.Lock()
			t, valid := ts.token, ts.token != "" && ts.now().Before(ts.expires)
			ts.mu.Unlock()
			if valid {
				return t, nil
			}
			return "", err
		}
		return t, nil
	}
}

// Rejected tells the source that the upstream refused token (401): the next Token exchanges the key
// again. A token already replaced is left alone.
func (ts *TokenSource) Rejected(token string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.token == token {
		ts.token = ""
	}
}

// TokenStatus is what the status shows of the tokens: never a token.
type TokenStatus struct {
	Expires  time.Time // of the current token; zero without one
	Issued   uint64    // tokens obtained
	Failures uint64    // exchanges that failed
}

// Status describes the source.
func (ts *TokenSource) Status() TokenStatus {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	st := TokenStatus{Issued: ts.issued.Load(), Failures: ts.failures.Load()}
	if ts.token != "" {
		st.Expires = ts.expires
	}
	return st
}

// Close releases the source's idle connections.
func (ts *TokenSource) Close() { ts.client.CloseIdleConnections() }

// exchange POSTs the API key to IAM and returns the token and when it expires. The error names IAM's
// URL and status, never the key nor IAM's answer (which could echo it).
func (ts *TokenSource) exchange(ctx context.Context) (token string, expires time.Time, err error) {
	fail := func(format string, args ...any) (string, time.Time, error) {
		return "", time.Time{}, fmt.Errorf("IAM %s: "+format, append([]any{ts.url}, args...)...)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url, strings.NewReader(ts.form))
	if err != nil {
		return fail("bad URL")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		return fail("%v", unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, iamMaxBody))
	if err != nil {
		return fail("reading the answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fail("status %d", resp.StatusCode)
	}
	var ans struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		Expiration  int64  `json:"expiration"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return fail("the answer is not JSON")
	}
	if ans.AccessToken == "" || strings.ContainsFunc(ans.AccessToken, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fail("the answer has no usable access_token")
	}
	now := ts.now()
	// The earlier of expires_in and expiration (IAM counts whole seconds from a truncated issue time);
	// an expiration already past by this clock is IAM's clock disagreeing, and expires_in decides.
	if ans.ExpiresIn > 0 {
		expires = now.Add(time.Duration(ans.ExpiresIn) * time.Second)
	}
	if exp := time.Unix(ans.Expiration, 0); ans.Expiration > 0 && exp.After(now) && (expires.IsZero() || exp.Before(expires)) {
		expires = exp
	}
	if expires.IsZero() {
		return fail("the answer says neither expiration nor expires_in")
	}
	if !expires.After(now) {
		return fail("the token has already expired")
	}
	return ans.AccessToken, expires, nil
}
