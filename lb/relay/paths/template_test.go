package paths

import (
	"slices"
	"strings"
	"testing"
)

func TestParseTemplateErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `relay: path "": must start with "/"`},
		{"relay/{a}", `relay: path "relay/{a}": must start with "/"`},
		{"/", `relay: path "/": has no segments`},
		{"/a/{x", `relay: path "/a/{x": unclosed "{" in segment "{x"`},
		{"/a/x}", `relay: path "/a/x}": unmatched "}" in segment "x}"`},
		{"/a/v{x}", `relay: path "/a/v{x}": a placeholder must be the whole segment, got "v{x}"`},
		{"/a/{x}{y}", `relay: path "/a/{x}{y}": a placeholder must be the whole segment, got "{x}{y}"`},
		{"/a/{}", `relay: path "/a/{}": invalid name "" in segment "{}": want [A-Za-z_][A-Za-z0-9_]*`},
		{"/a/{1x}", `relay: path "/a/{1x}": invalid name "1x" in segment "{1x}": want [A-Za-z_][A-Za-z0-9_]*`},
		{"/a/{x-y}", `relay: path "/a/{x-y}": invalid name "x-y" in segment "{x-y}": want [A-Za-z_][A-Za-z0-9_]*`},
		{"/{x}/{x}", `relay: path "/{x}/{x}": name "x" appears more than once`},
		{"/a/b", `relay: path "/a/b": has no {name}: a relay path needs at least one to identify the topic`},
		{"/a//{x}", `relay: path "/a//{x}": empty segment (a "//" or a trailing "/")`},
		{"/a/{x}/", `relay: path "/a/{x}/": empty segment (a "//" or a trailing "/")`},
		{"/a?q=1/{x}", `relay: path "/a?q=1/{x}": literal segment "a?q=1" contains "?" or "#": a template is a path only`},
	} {
		_, err := ParseTemplate(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseTemplate(%q) = %v, want %s", tc.in, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseTemplate(%q): error is not one line: %q", tc.in, err)
		}
	}
}

func TestParseTemplateNames(t *testing.T) {
	for _, tc := range []struct {
		in    string
		names []string
	}{
		{"/{a}", []string{"a"}},
		{"/relay/{collection}/{environment}", []string{"collection", "environment"}},
		{"/{_x9}/lit/{Y}/end", []string{"_x9", "Y"}},
	} {
		tp, err := ParseTemplate(tc.in)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", tc.in, err)
		}
		if !slices.Equal(tp.Names(), tc.names) || tp.String() != tc.in {
			t.Errorf("ParseTemplate(%q): names %q, string %q", tc.in, tp.Names(), tp.String())
		}
	}
}

func mustParse(t testing.TB, s string) *Template {
	t.Helper()
	tp, err := ParseTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func TestMatch(t *testing.T) {
	tp := mustParse(t, "/relay/{collection}/{environment}")
	for _, tc := range []struct {
		path string
		want []string // nil: no match
	}{
		{"/relay/inventory/dev", []string{"inventory", "dev"}},
		{"/relay/a.b_c-D9/x", []string{"a.b_c-D9", "x"}},
		{"/relay/inventory", nil},                  // too few segments
		{"/relay/inventory/dev/extra", nil},        // too many
		{"/relay/inventory/dev/", nil},             // trailing slash
		{"/relay//dev", nil},                       // empty value
		{"/relay/inventory/", nil},                 // empty last value
		{"/relay/inv%20entory/dev", nil},           // escape: outside the charset
		{"/relay/inv entory/dev", nil},             // space
		{"/relay/inventory/dev?x=1", nil},          // query strings are the caller's business
		{"/relais/inventory/dev", nil},             // literal differs
		{"/Relay/inventory/dev", nil},              // literals are case-sensitive
		{"relay/inventory/dev", nil},               // no leading slash
		{"", nil},                                  // empty
		{"/", nil},                                 // root
		{"//relay/inventory/dev", nil},             // empty first segment
		{"/relay/inventory/dév", nil},              // non-ASCII
		{"/relay/{collection}/dev", nil},           // braces are not values
		{"/relay/inventory/dev\x00", nil},          // control byte
		{"/relay/../dev", nil},                     // a dot-segment would climb in the upstream path
		{"/relay/./dev", nil},                      // so would "."
		{"/relay/.../dev", []string{"...", "dev"}}, // dots are in the charset otherwise
	} {
		vals, ok := tp.MatchInto([]byte(tc.path), nil)
		if ok != (tc.want != nil) {
			t.Errorf("Match(%q) ok = %v, want %v", tc.path, ok, tc.want != nil)
			continue
		}
		if !ok {
			continue
		}
		var got []string
		for _, v := range vals {
			got = append(got, string(v))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Match(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestMatchIntoDoesNotAllocate(t *testing.T) {
	tp := mustParse(t, "/relay/{collection}/{environment}")
	path := []byte("/relay/inventory/dev")
	vals := make([][]byte, 0, 2)
	var key []byte
	m := map[string]int{"inventory/dev": 1}
	n := testing.AllocsPerRun(100, func() {
		var ok bool
		vals, ok = tp.MatchInto(path, vals)
		if !ok {
			t.Fatal("no match")
		}
		key = AppendKey(key[:0], vals)
		if m[string(key)] != 1 {
			t.Fatal("lookup failed")
		}
	})
	if n != 0 {
		t.Errorf("MatchInto + AppendKey + lookup: %v allocs, want 0", n)
	}
	// The values are subslices of path, not copies.
	if &vals[0][0] != &path[len("/relay/")] {
		t.Error("values are not subslices of the path")
	}
}

func TestExpand(t *testing.T) {
	path := mustParse(t, "/relay/{collection}/{environment}")
	vals, ok := path.Match([]byte("/relay/inventory/dev"))
	if !ok {
		t.Fatal("no match")
	}
	for _, tc := range []struct{ tmpl, want string }{
		{"/config/{collection}/{environment}", "/config/inventory/dev"},
		{"/events/{environment}/{collection}/stream", "/events/dev/inventory/stream"}, // other order
		{"/{environment}", "/dev"}, // a subset of the names
	} {
		got := mustParse(t, tc.tmpl).Expand([]byte("prefix:"), path.Names(), vals)
		if string(got) != "prefix:"+tc.want {
			t.Errorf("Expand(%q) = %q, want %q", tc.tmpl, got, "prefix:"+tc.want)
		}
	}
	// With room in dst, expansion allocates nothing.
	snap := mustParse(t, "/config/{collection}/{environment}")
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = snap.Expand(buf[:0], path.Names(), vals) }); n != 0 {
		t.Errorf("Expand: %v allocs, want 0", n)
	}
	// A name the path does not define is a programming error caught by CheckExpandable.
	defer func() {
		if recover() == nil {
			t.Error("Expand with an undefined name did not panic")
		}
	}()
	mustParse(t, "/{other}").Expand(nil, path.Names(), vals)
}

func TestCheckExpandable(t *testing.T) {
	path := mustParse(t, "/relay/{collection}/{environment}")
	for _, tc := range []struct{ tmpl, want string }{
		{"/config/{collection}/{environment}", ""},
		{"/config/{environment}", ""},
		{"/config/{collection}/{env}", `relay: template "/config/{collection}/{env}" uses {env}, which path "/relay/{collection}/{environment}" does not define`},
	} {
		err := mustParse(t, tc.tmpl).CheckExpandable(path)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckExpandable(%q) = %q, want %q", tc.tmpl, got, tc.want)
		}
	}
}

func TestTopicKeyAndSplitTopic(t *testing.T) {
	if got := Key([][]byte{[]byte("inventory"), []byte("dev")}); got != "inventory/dev" {
		t.Errorf("Key = %q", got)
	}
	for _, tc := range []struct {
		key  string
		n    int
		want []string
		err  string
	}{
		{"inventory/dev", 2, []string{"inventory", "dev"}, ""},
		{"solo", 1, []string{"solo"}, ""},
		{"inventory", 2, nil, `relay: topic "inventory" has 1 part(s), the path defines 2 name(s)`},
		{"a/b/c", 2, nil, `relay: topic "a/b/c" has 3 part(s), the path defines 2 name(s)`},
		{"inventory/", 2, nil, `relay: topic "inventory/": part "" is not [A-Za-z0-9._-]+`},
		{"/dev", 2, nil, `relay: topic "/dev": part "" is not [A-Za-z0-9._-]+`},
		{"inv entory/dev", 2, nil, `relay: topic "inv entory/dev": part "inv entory" is not [A-Za-z0-9._-]+`},
		{"", 1, nil, `relay: topic "": part "" is not [A-Za-z0-9._-]+`},
	} {
		got, err := Split(tc.key, tc.n)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if gotErr != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("Split(%q, %d) = %q, %q; want %q, %q", tc.key, tc.n, got, gotErr, tc.want, tc.err)
		}
	}
	// A configured topic round-trips through a request path.
	path := mustParse(t, "/relay/{collection}/{environment}")
	parts, err := Split("payments/prod", len(path.Names()))
	if err != nil {
		t.Fatal(err)
	}
	vals, ok := path.Match([]byte("/relay/" + strings.Join(parts, "/")))
	if !ok || Key(vals) != "payments/prod" {
		t.Errorf("round trip: %q %v", vals, ok)
	}
}

// Overlap finds a path two templates both match exactly when there is one: the path it returns is
// matched by both, and templates it finds disjoint match none of a set of probes in common.
func TestOverlapFindsAPathBothTemplatesMatch(t *testing.T) {
	f := func(a, b, want string) {
		t.Helper()
		ta, tb := mustParse(t, a), mustParse(t, b)
		got, ok := ta.Overlap(tb)
		if got != want || ok != (want != "") {
			t.Errorf("%s, %s: %q %v, want %q", a, b, got, ok, want)
		}
		if back, _ := tb.Overlap(ta); back != got {
			t.Errorf("%s, %s: %q one way, %q the other", a, b, got, back)
		}
		if ok {
			if _, ma := ta.Match([]byte(got)); !ma {
				t.Errorf("%s does not match %q", a, got)
			}
			if _, mb := tb.Match([]byte(got)); !mb {
				t.Errorf("%s does not match %q", b, got)
			}
		}
	}
	f("/relay/{c}/{e}", "/relay/{c}/{e}", "/relay/x/x")
	f("/relay/{c}/{e}", "/relay/{a}/{b}", "/relay/x/x") // other names, the same paths
	f("/relay/{c}/{e}", "/relay/inventory/{e}", "/relay/inventory/x")
	f("/{a}/{b}", "/relay/{c}", "/relay/x")
	f("/relay/{c}/{e}", "/relay/{c}", "")      // another number of segments
	f("/relay/{c}/{e}", "/config/{c}/{e}", "") // another literal
	f("/relay/{c}/{e}", "/Relay/{c}/{e}", "")  // literals are case-sensitive
	f("/relay/a~b/{e}", "/relay/{c}/{e}", "")  // a literal no value can be
	f("/relay/{c}/dev", "/relay/{c}/prod", "") // literals differ after a common one

	under := func(tmpl, want string) {
		t.Helper()
		got, ok := mustParse(t, tmpl).Under("apprapp")
		if got != want || ok != (want != "") {
			t.Errorf("%s under /apprapp/: %q %v, want %q", tmpl, got, ok, want)
		}
	}
	under("/apprapp/{a}", "/apprapp/x")
	under("/{a}/{b}/c", "/apprapp/x/c")
	under("/{a}", "")          // one segment: nothing under /apprapp/
	under("/relay/{a}", "")    // another first segment
	under("/apprapp2/{a}", "") // another first segment
}
