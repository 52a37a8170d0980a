// Package paths holds the path templates of relay routes ("/relay/{collection}/{environment}") and the
// topic keys they make ("inventory/dev"): the client path a request matches, the upstream snapshot and
// events paths a topic expands to, and the check of a configured topic. It is a leaf: lb/config parses
// templates with it, and the relay matches and expands them.
package paths

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A Template is a parsed path template such as "/relay/{collection}/{environment}": a
// sequence of "/"-separated segments, each either a literal or exactly one {name}. The same
// type serves the client-facing path (matched against request paths) and the upstream
// snapshot and events paths (expanded with the values a request matched). A Template is
// immutable after ParseTemplate and safe for concurrent use.
type Template struct {
	raw   string
	segs  []segment
	names []string
}

// segment is one part of a Template between slashes: a literal when name < 0, else the
// index into Template.names of the value that fills it.
type segment struct {
	lit  string
	name int
}

// ParseTemplate parses s, which must start with "/". Every segment must be non-empty (so no
// "//" and no trailing slash) and either a literal without braces, "?" or "#", or exactly
// {name} with name matching [A-Za-z_][A-Za-z0-9_]*. A name may appear only once, and at least
// one name is required, since a relay topic is identified by the values of its names. The
// error, if any, is one line naming the template and the offending segment.
func ParseTemplate(s string) (*Template, error) {
	fail := func(format string, args ...any) (*Template, error) {
		return nil, fmt.Errorf("relay: path %q: "+format, append([]any{s}, args...)...)
	}
	if !strings.HasPrefix(s, "/") {
		return fail(`must start with "/"`)
	}
	t := &Template{raw: s}
	for i, seg := range strings.Split(s[1:], "/") {
		switch {
		case seg == "" && i == 0 && len(s) == 1:
			return fail("has no segments")
		case seg == "":
			return fail(`empty segment (a "//" or a trailing "/")`)
		case strings.HasPrefix(seg, "{"):
			if !strings.HasSuffix(seg, "}") {
				return fail(`unclosed "{" in segment %q`, seg)
			}
			name := seg[1 : len(seg)-1]
			if strings.ContainsAny(name, "{}") {
				return fail(`a placeholder must be the whole segment, got %q`, seg)
			}
			if !validName(name) {
				return fail("invalid name %q in segment %q: want [A-Za-z_][A-Za-z0-9_]*", name, seg)
			}
			if slices.Index(t.names, name) >= 0 {
				return fail("name %q appears more than once", name)
			}
			t.segs = append(t.segs, segment{name: len(t.names)})
			t.names = append(t.names, name)
		case strings.ContainsAny(seg, "{}"):
			if strings.Contains(seg, "{") {
				return fail(`a placeholder must be the whole segment, got %q`, seg)
			}
			return fail(`unmatched "}" in segment %q`, seg)
		case strings.ContainsAny(seg, "?#"):
			return fail(`literal segment %q contains "?" or "#": a template is a path only`, seg)
		default:
			t.segs = append(t.segs, segment{lit: seg, name: -1})
		}
	}
	if len(t.names) == 0 {
		return fail("has no {name}: a relay path needs at least one to identify the topic")
	}
	return t, nil
}

// String returns the template as it was parsed.
func (t *Template) String() string { return t.raw }

// Names returns the template's names in the order they appear. The slice is shared: the
// caller must not modify it.
func (t *Template) Names() []string { return t.names }

// Match is MatchInto with a fresh values slice, for callers that do not care about
// allocation (configuration checks, tests).
func (t *Template) Match(path []byte) (vals [][]byte, ok bool) {
	return t.MatchInto(path, make([][]byte, 0, len(t.names)))
}

// MatchInto matches path (the path only: the caller strips the query string) against the
// template. On success it returns vals[:0] with one value appended per name, in the order of
// Names, each a subslice of path (no copy), so with a vals of capacity len(Names()) it
// allocates nothing. A value is one non-empty segment of [A-Za-z0-9._-]; anything else (a
// different number of segments, an empty segment, a trailing slash, another character such
// as a percent escape) is no match, and the values returned so far must be ignored. Because
// values are restricted to this character set they can be put into upstream paths and topic
// keys without escaping.
func (t *Template) MatchInto(path []byte, vals [][]byte) ([][]byte, bool) {
	vals = vals[:0]
	for _, seg := range t.segs {
		if len(path) == 0 || path[0] != '/' {
			return vals, false
		}
		path = path[1:]
		end := 0
		for end < len(path) && path[end] != '/' {
			end++
		}
		part := path[:end]
		path = path[end:]
		if seg.name < 0 {
			if string(part) != seg.lit {
				return vals, false
			}
			continue
		}
		if !validValue(part) {
			return vals, false
		}
		vals = append(vals, part)
	}
	return vals, len(path) == 0
}

// Expand appends the template to dst with each {name} replaced by the value in vals at the
// index of that name in names (vals[i] belongs to names[i]). It is meant for the snapshot
// and events templates, given the path template's names and the values a request matched,
// and allocates nothing when dst has room. Values are appended as they are, unescaped,
// which is safe for values that passed MatchInto or Split. A name missing from names
// is a configuration error that CheckExpandable catches at load time, so Expand panics on
// it rather than building a wrong upstream path.
func (t *Template) Expand(dst []byte, names []string, vals [][]byte) []byte {
	for _, seg := range t.segs {
		dst = append(dst, '/')
		if seg.name < 0 {
			dst = append(dst, seg.lit...)
			continue
		}
		i := slices.Index(names, t.names[seg.name])
		if i < 0 || i >= len(vals) {
			panic("relay: template " + strconv.Quote(t.raw) + ": no value for {" + t.names[seg.name] + "} (CheckExpandable was not called)")
		}
		dst = append(dst, vals[i]...)
	}
	return dst
}

// CheckExpandable reports whether every name of t is defined by from, so that t can be
// expanded with the values a request matched against from. It is how a relay's snapshot and
// events templates are validated against its path template when the configuration loads.
// from may define names that t does not use.
func (t *Template) CheckExpandable(from *Template) error {
	for _, name := range t.names {
		if slices.Index(from.names, name) < 0 {
			return fmt.Errorf("relay: template %q uses {%s}, which path %q does not define", t.raw, name, from.raw)
		}
	}
	return nil
}

// Key returns the key of the topic a request matched: its values joined by "/", in
// the order of the path template's names, e.g. "inventory/dev".
func Key(vals [][]byte) string {
	return string(AppendKey(nil, vals))
}

// AppendKey appends the topic key of vals to dst, for callers that look topics up
// without allocating (a map lookup with string(key) does not copy).
func AppendKey(dst []byte, vals [][]byte) []byte {
	for i, v := range vals {
		if i > 0 {
			dst = append(dst, '/')
		}
		dst = append(dst, v...)
	}
	return dst
}

// Split validates a configured topic key such as "inventory/dev" against a path
// template with n names and returns its values: exactly n "/"-separated parts, each a valid
// value ([A-Za-z0-9._-]+, not "." or ".."), so that the topic can be matched by a request and its upstream
// paths expanded.
func Split(key string, n int) ([]string, error) {
	parts := strings.Split(key, "/")
	if len(parts) != n {
		return nil, fmt.Errorf("relay: topic %q has %d part(s), the path defines %d name(s)", key, len(parts), n)
	}
	for _, p := range parts {
		if !validValue([]byte(p)) {
			return nil, fmt.Errorf("relay: topic %q: part %q is not [A-Za-z0-9._-]+", key, p)
		}
	}
	return parts, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// validValue reports whether b can be a value: [A-Za-z0-9._-]+, but not "." or "..", which
// would be dot-segments in the upstream paths.
func validValue(b []byte) bool {
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return false
	}
	for _, c := range b {
		if c == '.' || c == '_' || c == '-' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// ValidKey reports whether key is a topic key of n values ("inventory/dev" for n = 2), each a valid
// value, as Split would accept it; it does not allocate.
func ValidKey(key []byte, n int) bool {
	for i := 0; i < n; i++ {
		j := bytes.IndexByte(key, '/')
		if i == n-1 {
			return j < 0 && validValue(key)
		}
		if j < 0 || !validValue(key[:j]) {
			return false
		}
		key = key[j+1:]
	}
	return false
}

// Overlap returns a path that both t and u match, and whether there is one: they have as many
// segments, and at each the same literal, or a {name} and a literal a value can be, or two {name}s
// (filled with "x" in the path returned). Two relays on one host must not overlap: a request both
// match would go to one of them only.
func (t *Template) Overlap(u *Template) (string, bool) {
	if len(t.segs) != len(u.segs) {
		return "", false
	}
	var b strings.Builder
	for i, s := range t.segs {
		v := u.segs[i]
		b.WriteByte('/')
		switch {
		case s.name >= 0 && v.name >= 0:
			b.WriteString("x")
		case s.name < 0 && v.name < 0:
			if s.lit != v.lit {
				return "", false
			}
			b.WriteString(s.lit)
		default:
			lit := s.lit
			if s.name >= 0 {
				lit = v.lit
			}
			if !validValue([]byte(lit)) {
				return "", false
			}
			b.WriteString(lit)
		}
	}
	return b.String(), true
}

// Under returns a path t matches whose first segment is first and that has more segments after it
// (a path under "/first/"), and whether there is one.
func (t *Template) Under(first string) (string, bool) {
	if len(t.segs) < 2 {
		return "", false
	}
	return (&Template{segs: append([]segment{{lit: first, name: -1}}, t.segs[1:]...)}).Overlap(t)
}
