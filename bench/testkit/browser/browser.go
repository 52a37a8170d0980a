// Package browser drives a headless Chromium for tests of the status page (package admin's, with a
// test backend, and package lb's, through a running fairlead): one tab, steps, JavaScript conditions
// polled until true, and the page's console watched for exceptions and Content Security Policy
// violations, which fail the test at its end. It is apart from testkit so that only tests link
// chromedp.
package browser

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// findChromium returns the browser to drive, or skips the test when the machine has none (CI installs
// the Debian chromium package, so there the test runs).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium binary (/usr/bin/chromium): install the chromium package to run the status page test")
	return ""
}

// Page drives one browser tab; what it finds wrong in the page's console (an exception, a Content
// Security Policy violation) fails the test at its end.
type Page struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string
}

// Open starts a headless Chromium (more adds to chromedp's default options) with one tab, until ctx
// ends or the test does.
func Open(t *testing.T, ctx context.Context, more ...chromedp.ExecAllocatorOption) *Page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findChromium(t)), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(opts, more...)...)
	bctx, cancelTab := chromedp.NewContext(actx)
	p := &Page{t: t, ctx: bctx}
	// Console starts the browser: here, before any other call on bctx.
	messages := chromedp.Console(bctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				p.mu.Lock()
				p.problems = append(p.problems, m.String())
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, pr := range p.problems {
			t.Errorf("page console: %s", pr)
		}
	})
	return p
}

// Do runs steps, failing the test with what if one fails.
func (p *Page) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// WaitFor polls the JavaScript expression cond until it is true, failing the test with the page's
// text if it is not within timeout.
func (p *Page) WaitFor(timeout time.Duration, what, cond string) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](cond,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		p.t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, text)
	}
}

// Eval returns the value of the JavaScript expression expr, a string.
func (p *Page) Eval(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// JSString quotes s as a JavaScript string literal.
func JSString(s string) string { return fmt.Sprintf("%q", s) }
