package sim

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The simulated IBM Cloud IAM token service: what an App Configuration client (fairlead's relay, the
// server SDKs) exchanges its IBM Cloud API key for a bearer token with. See AppConfig, whose instances
// accept the tokens it issues.

// IAMGrantAPIKey is the grant type of the API key exchange.
const IAMGrantAPIKey = "urn:ibm:params:oauth:grant-type:apikey"

// iamDefaultExpiresIn is the life of a token, as IBM Cloud IAM gives it.
const iamDefaultExpiresIn = time.Hour

var (
	pathIAMToken   = []byte("/identity/token")
	iamJWTHeader   = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT","kid":"sim"}`))
	formURLEncoded = []byte("application/x-www-form-urlencoded")
)

// IAMOptions configures a simulated IAM token service.
type IAMOptions struct {
	// APIKeys are the API keys exchanged for tokens; any other is refused (400).
	APIKeys []string
	// ExpiresIn is the life of a token (default 1h), rounded up to whole seconds as IAM's expires_in
	// and the token's exp are; tests of renewal give a few seconds.
	ExpiresIn time.Duration
	// Now, if set, is the service's clock (default time.Now): it stamps the tokens and decides Valid.
	Now func() time.Time
	// TLS, if set, serves over TLS with this config; nil serves plain HTTP.
	TLS *tls.Config
	// Logf, if set, receives the service's stops and starts and server errors. Neither API keys nor
	// tokens are ever logged.
	Logf func(format string, args ...any)
}

// IAM is a simulated IBM Cloud IAM token service. It serves one endpoint:
//
//	POST /identity/token   form grant_type=urn:ibm:params:oauth:grant-type:apikey&apikey=KEY
//	                       (response_type=cloud_iam accepted and ignored)
//
// answered 200 application/json
//
//	{"access_token":"<JWT>","refresh_token":"not_supported","token_type":"Bearer",
//	 "expires_in":3600,"expiration":<exp>,"scope":"ibm openid"}
//
// where the JWT is base64url {"alg":"RS256","typ":"JWT","kid":"sim"}, a payload with iam_id, sub, iat,
// exp (= iat + expires_in, = expiration) and a random jti, and random signature bytes (the SDKs decode
// tokens without verifying them). A request whose grant type is not the API key one, or whose apikey
// is missing or unknown, is answered 400 with an IAM-like JSON error ({"errorCode":"BXNIM…",
// "errorMessage":…}; the codes are IAM's as far as known, the rest invented) and counted as refused;
// another method 405, another path 404.
//
// Valid tells whether a token was issued here and has not expired by the service's clock;
// RevokeAll makes every issued token invalid (as a service answering 401 to a token would see it).
// Stop and Start kill and revive the service; the issued tokens stay valid across them.
//
// All methods are safe for concurrent use.
type IAM struct {
	// Addr is the host:port the service listens on; it does not change across Stop and Start.
	Addr string

	srv       *netServer
	logf      func(format string, args ...any)
	now       func() time.Time
	keys      map[string]bool
	expiresIn int64 // seconds
	scheme    string

	opMu sync.Mutex // serializes Stop and Start

	mu      sync.Mutex
	tokens  map[string]time.Time // token → expiry
	issued  int64
	refused int64
}

// IAMStats is a snapshot of an IAM service's counters.
type IAMStats struct {
	Addr string `json:"addr"`
	Up   bool   `json:"up"`
	// Issued counts the tokens issued, Refused the token requests answered 400, since the start or the
	// last ResetCounters.
	Issued  int64 `json:"issued"`
	Refused int64 `json:"refused"`
	// Valid is the number of issued tokens valid now.
	Valid int `json:"valid"`
}

// StartIAM starts a simulated IAM token service on addr ("host:0" picks a free port); Close stops it
// for good.
func StartIAM(addr string, opts IAMOptions) (*IAM, error) {
	s := &IAM{
		logf:      opts.Logf,
		now:       opts.Now,
		keys:      map[string]bool{},
		expiresIn: int64((max(opts.ExpiresIn, 0) + time.Second - 1) / time.Second),
		tokens:    map[string]time.Time{},
		scheme:    "http",
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.ExpiresIn == 0 {
		s.expiresIn = int64(iamDefaultExpiresIn / time.Second)
	}
	if opts.TLS != nil {
		s.scheme = "https"
	}
	for _, k := range opts.APIKeys {
		s.keys[k] = true
	}
	srv, err := newNetServer(addr, opts.TLS, s.newServer, s.logf)
	if err != nil {
		return nil, fmt.Errorf("iam: %w", err)
	}
	s.srv = srv
	s.Addr = srv.addr
	return s, nil
}

func (s *IAM) newServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               s.handle,
		Name:                  "fairlead-sim",
		ReadBufferSize:        16 << 10,
		SecureErrorLogMessage: true, // a request's bytes (its API key) never reach the log
		Logger:                fasthttpLogger{prefix: "iam: ", logf: s.logf},
	}
}

// URL is the service's base URL, "http://Addr" (https with TLS); tokens are POSTed to URL()+"/identity/token".
func (s *IAM) URL() string { return s.scheme + "://" + s.Addr }

// Valid reports whether token was issued by this service and has not expired by its clock, nor been
// revoked.
func (s *IAM) Valid(token string) bool {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.tokens[token]
	return ok && now.Before(exp)
}

// RevokeAll makes every token issued so far invalid.
func (s *IAM) RevokeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// Stats returns a snapshot of the service's counters.
func (s *IAM) Stats() IAMStats {
	now := s.now()
	st := IAMStats{Addr: s.Addr, Up: s.Up()}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Issued, st.Refused = s.issued, s.refused
	for _, exp := range s.tokens {
		if now.Before(exp) {
			st.Valid++
		}
	}
	return st
}

// ResetCounters zeroes the tokens issued and refused; the tokens stay valid.
func (s *IAM) ResetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.issued, s.refused = 0, 0
}

// Stop simulates the service dying: the listener and every open connection close. A no-op when stopped.
func (s *IAM) Stop() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	wasUp := s.srv.running()
	s.srv.stop()
	if wasUp {
		s.logf("iam: stopped")
	}
}

// Start listens again on Addr after Stop. A no-op when running; it fails once closed.
func (s *IAM) Start() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.srv.running() {
		return nil
	}
	if err := s.srv.start(); err != nil {
		return fmt.Errorf("iam: %w", err)
	}
	s.logf("iam: started")
	return nil
}

// Up reports whether the service is running (not stopped).
func (s *IAM) Up() bool { return s.srv.running() }

// Close stops the service for good.
func (s *IAM) Close() { s.srv.close() }

func (s *IAM) handle(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) != string(pathIAMToken) {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBody(bodyNotFound)
		return
	}
	if !ctx.IsPost() {
		ctx.Response.Header.Set(fasthttp.HeaderAllow, fasthttp.MethodPost)
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBodyString("method not allowed\n")
		return
	}
	ct := ctx.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	args := ctx.PostArgs()
	switch {
	case string(ct) != string(formURLEncoded):
		s.refuse(ctx, "BXNIM0109E", "Property missing or empty. Operation requires the property 'grant_type' to be set.")
		return
	case string(args.Peek("grant_type")) != IAMGrantAPIKey:
		s.refuse(ctx, "BXNIM0104E", "Unsupported grant type.")
		return
	case len(args.Peek("apikey")) == 0:
		s.refuse(ctx, "BXNIM0109E", "Property missing or empty. Operation requires the property 'apikey' to be set.")
		return
	case !s.keys[string(args.Peek("apikey"))]:
		s.refuse(ctx, "BXNIM0415E", "Provided API key could not be found.")
		return
	}

	now := s.now()
	iat := now.Unix()
	exp := iat + s.expiresIn
	token := s.newToken(iat, exp)
	s.mu.Lock()
	for t, e := range s.tokens { // keep the map as small as the valid tokens
		if !now.Before(e) {
			delete(s.tokens, t)
		}
	}
	s.tokens[token] = time.Unix(exp, 0)
	s.issued++
	s.mu.Unlock()
	body, _ := json.Marshal(struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		TokenType    string `json:"token_type"`
		ExpiresIn    int64  `json:"expires_in"`
		Expiration   int64  `json:"expiration"`
		Scope        string `json:"scope"`
	}{token, "not_supported", "Bearer", s.expiresIn, exp, "ibm openid"})
	ctx.SetContentTypeBytes(applicationJSON)
	ctx.SetBody(body)
}

// refuse answers a token request 400 with an IAM-like error and counts it.
func (s *IAM) refuse(ctx *fasthttp.RequestCtx, code, message string) {
	s.mu.Lock()
	s.refused++
	s.mu.Unlock()
	body, _ := json.Marshal(struct {
		ErrorCode    string            `json:"errorCode"`
		ErrorMessage string            `json:"errorMessage"`
		Context      map[string]string `json:"context"`
	}{code, message, map[string]string{"requestId": randomID(8), "requestType": "incoming.Identity_Token"}})
	ctx.SetStatusCode(fasthttp.StatusBadRequest)
	ctx.SetContentTypeBytes(applicationJSON)
	ctx.SetBody(body)
}

// newToken returns a JWT-shaped token for a service ID, issued at iat and expiring at exp (Unix
// seconds), unique by its random jti; its signature is random bytes.
func (s *IAM) newToken(iat, exp int64) string {
	payload, _ := json.Marshal(map[string]any{
		"iam_id": "iam-ServiceId-fairlead-sim",
		"sub":    "ServiceId-fairlead-sim",
		"iss":    s.URL() + "/identity",
		"iat":    iat,
		"exp":    exp,
		"jti":    randomID(16),
	})
	sig := make([]byte, 64)
	_, _ = rand.Read(sig)
	return iamJWTHeader + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// randomID returns n random bytes in hex.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	const hex = "0123456789abcdef"
	out := make([]byte, 2*n)
	for i, c := range b {
		out[2*i], out[2*i+1] = hex[c>>4], hex[c&15]
	}
	return string(out)
}
