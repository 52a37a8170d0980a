package acme

// The library's own log (zap): what it logs at Warn or Error goes to fairlead's log as one WARN line
// (Hooks.Warn), so that a failure it reports no event for (a lock or a save in storage failing, an
// ARI window that moved) is still seen; what the cert_failed event already says is left out, and the
// rest (Info, Debug: each step of an order) is dropped.

import (
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// reportedByEvents are the library's lines that cert_failed already says, word for word in its detail.
var reportedByEvents = []string{"could not get certificate from issuer", "will retry", "final attempt; giving up"}

// warnCore is a zapcore.Core writing Warn and Error entries to warn.
type warnCore struct {
	warn   func(string)
	fields []zapcore.Field
}

func newLibraryLogger(warn func(string)) *zap.Logger {
	if warn == nil {
		return zap.NewNop()
	}
	return zap.New(&warnCore{warn: warn})
}

func (c *warnCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *warnCore) With(fields []zapcore.Field) zapcore.Core {
	return &warnCore{warn: c.warn, fields: append(slices.Clip(c.fields), fields...)}
}

func (c *warnCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) && !slices.Contains(reportedByEvents, e.Message) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write writes "acme: MESSAGE (key=value, …)"; the library's fields are identifiers, URLs, times and
// errors, never keys.
func (c *warnCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clip(c.fields), fields...) {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString("acme: " + e.Message)
	for i, k := range keys {
		sep := ", "
		if i == 0 {
			sep = " ("
		}
		fmt.Fprintf(&b, "%s%s=%v", sep, k, enc.Fields[k])
	}
	if len(keys) > 0 {
		b.WriteString(")")
	}
	c.warn(b.String())
	return nil
}

func (c *warnCore) Sync() error { return nil }
