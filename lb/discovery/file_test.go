package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
)

// The file provider on real files: edits in place and renamed over, invalid contents, a missing and a
// deleted file, a Kubernetes ConfigMap's symlink swap, a directory that appears later, and the TOML and
// JSON forms of a server list.

// watchProvider runs a file provider on path until the end of the test; found lists and errors arrive
// on the channels.
func watchProvider(t *testing.T, path string) (<-chan []string, <-chan error) {
	t.Helper()
	pv, err := newFileProvider(config.Discovery{File: path}, Options{Pool: "p", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lists, errs := make(chan []string, 100), make(chan error, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pv.Watch(ctx, func(l []string) { lists <- l }, func(e error) { errs <- e })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return lists, errs
}

func nextList(t *testing.T, lists <-chan []string, errs <-chan error, what string) []string {
	t.Helper()
	select {
	case l := <-lists:
		return l
	case err := <-errs:
		t.Fatalf("%s: error %v", what, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no list", what)
	}
	return nil
}

func TestFileProviderFollowsAKubernetesConfigMapSymlinkSwap(t *testing.T) {
	// A mounted ConfigMap: cx.toml → ..data/cx.toml, ..data → ..v1; an update writes ..v2, points
	// ..data_tmp at it and renames ..data_tmp over ..data. cx.toml itself never changes.
	dir := t.TempDir()
	for v, addr := range map[string]string{"..v1": "10.0.0.1:8080", "..v2": "10.0.0.2:8080"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		discoverytest.WriteFile(t, filepath.Join(dir, v, "cx.toml"), discoverytest.TOMLServers(addr))
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	must(os.Symlink(filepath.Join("..data", "cx.toml"), filepath.Join(dir, "cx.toml")))
	lists, errs := watchProvider(t, filepath.Join(dir, "cx.toml"))
	if l := nextList(t, lists, errs, "at start"); !slices.Equal(l, []string{"10.0.0.1:8080"}) {
		t.Fatalf("at start: %v", l)
	}
	must(os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	if l := nextList(t, lists, errs, "after the swap"); !slices.Equal(l, []string{"10.0.0.2:8080"}) {
		t.Fatalf("after the swap: %v", l)
	}
	// Only changes are reported: an unrelated file in the directory reports nothing.
	discoverytest.WriteFile(t, filepath.Join(dir, "unrelated"), "x")
	select {
	case l := <-lists:
		t.Fatalf("an unrelated event reported %v again", l)
	case err := <-errs:
		t.Fatalf("an unrelated event: %v", err)
	case <-time.After(3 * FileDebounce):
	}
}

func TestFileProviderPollsADirectoryThatAppearsLater(t *testing.T) {
	old := filePoll
	filePoll = 100 * time.Millisecond
	t.Cleanup(func() { filePoll = old })
	dir := filepath.Join(t.TempDir(), "not-yet")
	file := filepath.Join(dir, "cx.json")
	lists, errs := watchProvider(t, file)
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), file) {
			t.Fatalf("the error does not name the file: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no error for a missing directory")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	discoverytest.WriteFile(t, file, `["10.0.0.1:8080"]`)
	if l := nextList(t, lists, errs, "once written"); !slices.Equal(l, []string{"10.0.0.1:8080"}) {
		t.Fatalf("once written: %v", l)
	}
	// The directory is watched from the poll on: an edit is followed within the debounce.
	discoverytest.WriteFile(t, file, `["10.0.0.2:8080"]`)
	if l := nextList(t, lists, errs, "an edit"); !slices.Equal(l, []string{"10.0.0.2:8080"}) {
		t.Fatalf("after an edit: %v", l)
	}
}

func TestFileDiscoveryParsesTOMLAndJSONServerLists(t *testing.T) {
	f := func(name, body string, want []string, wantErr string) {
		t.Helper()
		got, err := parseServerFile(name, []byte(body))
		switch {
		case wantErr != "":
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s %q: got %v, %v; want the error %q", name, body, got, err, wantErr)
			}
		case err != nil:
			t.Errorf("%s %q: %v", name, body, err)
		case got == nil || !slices.Equal(got, want):
			t.Errorf("%s %q: got %#v, want %#v", name, body, got, want)
		}
	}
	two := []string{"10.0.0.1:8080", "cx2.internal:8080"}
	f("a.toml", "servers = [\"10.0.0.1:8080\", \"cx2.internal:8080\"]\n", two, "")
	f("a.toml", "# comment\nservers = [\n  \"10.0.0.1:8080\",\n  \"cx2.internal:8080\",\n]\n", two, "")
	f("a.toml", "servers = []", []string{}, "")
	f("a.json", `{"servers": ["10.0.0.1:8080", "cx2.internal:8080"]}`, two, "")
	f("a.json", "\ufeff [\"10.0.0.1:8080\", \"cx2.internal:8080\"]\n", two, "")
	f("a.json", `[]`, []string{}, "")
	f("a.json", `{"servers": []}`, []string{}, "")
	f("a.JSON", `["[fd00::1]:8080"]`, []string{"[fd00::1]:8080"}, "")
	// Without .toml or .json: JSON if it starts with { or [, else TOML.
	f("cx-servers", `["10.0.0.1:8080", "cx2.internal:8080"]`, two, "")
	f("cx-servers.list", ` {"servers": ["10.0.0.1:8080", "cx2.internal:8080"]}`, two, "")
	f("cx-servers", "servers = [\"10.0.0.1:8080\", \"cx2.internal:8080\"]", two, "")

	f("a.toml", "", nil, "no servers key")
	f("a.toml", "servers = [\"10.0.0.1:8080\"", nil, "not a TOML server list: toml: line 1")
	f("a.toml", "servers = \"10.0.0.1:8080\"", nil, "not a TOML server list")
	f("a.toml", "servers = [\"10.0.0.1:8080\"]\nweight = 1", nil, "unknown key weight")
	f("a.toml", "[pool]\nservers = [\"10.0.0.1:8080\"]", nil, "unknown key pool")
	f("a.json", "", nil, "not a JSON server list: want")
	f("a.json", "null", nil, "not a JSON server list: want")
	f("a.json", `{"servers": null}`, nil, `no "servers" field`)
	f("a.json", `{"Servers": ["10.0.0.1:8080"], "x": 1}`, nil, `unknown field "x"`)
	f("a.json", `["10.0.0.1:8080"] ["10.0.0.2:8080"]`, nil, "more than one value")
	f("a.json", `["10.0.0.1:8080", 8080]`, nil, "cannot unmarshal number")
	f("a.json", `["10.0.0.1:8080"`, nil, "not a JSON server list")
	f("a.json", `["10.0.0.1"]`, nil, `servers[0]: bad address "10.0.0.1": missing port in address`)
	f("a.json", `["10.0.0.1:8080", ""]`, nil, `servers[1]: bad address ""`)
	f("a.json", `[":8080"]`, nil, `servers[0]: bad address ":8080": want host:port with a host and a port`)
	f("a.json", `["10.0.0.1:0"]`, nil, `servers[0]: bad address "10.0.0.1:0"`)
	f("a.json", `["10.0.0.1:99999"]`, nil, `bad port "99999"`)
	f("a.json", `["cx 1:8080"]`, nil, `servers[0]: bad address "cx 1:8080"`)
}

// fileFollow is how long an edit may take to be in force: the debounce, and slack for a loaded machine.
const fileFollow = FileDebounce + 600*time.Millisecond

// logLine returns the first line of log containing every part, or "".
func logLine(log string, parts ...string) string {
	for _, line := range strings.Split(log, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return line
		}
	}
	return ""
}

func TestFileProviderFollowsEditsInPlaceAndRenamedOverAndKeepsTheLastListOnInvalidOnes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cx-servers.toml")
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers("127.0.0.1:9001"))
	rn := run(t, config.Discovery{Provider: "file", File: file}, false)
	rn.follows(t, fileFollow, "the file read at start", "127.0.0.1:9001")
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers("127.0.0.1:9001", "127.0.0.1:9002"))
	rn.follows(t, fileFollow, "an edit in place", "127.0.0.1:9001", "127.0.0.1:9002")
	// An editor's save: a temporary file renamed over the file.
	discoverytest.RenameOver(t, file, discoverytest.TOMLServers("127.0.0.1:9002", "127.0.0.1:9003"))
	rn.follows(t, fileFollow, "a rename over the file", "127.0.0.1:9002", "127.0.0.1:9003")

	// Invalid edits are ignored with a logged error naming the file; the list stays.
	for i, bad := range []struct{ body, why string }{
		{"servers = [\"127.0.0.1:9002\", \n", "not a TOML server list"},
		{discoverytest.TOMLServers("127.0.0.1:9002", "cx3-without-port"), `servers[1]: bad address "cx3-without-port"`},
		{"server = [\"127.0.0.1:9002\"]\n", "unknown key server"},
		{"", "no servers key"},
	} {
		discoverytest.WriteFile(t, file, bad.body)
		testkit.Eventually(t, fmt.Sprint("the error of invalid edit ", i), 5*time.Second, func() bool { return rn.Status().Errors == uint64(i+1) })
		if line := logLine(rn.log(), "discovery: pool p: file: "+file+": ", bad.why, "keeping the last list"); line == "" {
			t.Errorf("invalid edit %d: no log line naming %s and %q:\n%s", i, file, bad.why, rn.log())
		}
		if s := rn.Status(); !slices.Equal(s.Servers, []string{"127.0.0.1:9002", "127.0.0.1:9003"}) || !strings.Contains(s.LastError, file) {
			t.Fatalf("after invalid edit %d: %+v", i, s)
		}
	}

	// Fixed: followed again, the error cleared.
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers("127.0.0.1:9003"))
	rn.follows(t, fileFollow, "a valid edit after invalid ones", "127.0.0.1:9003")
	if s := rn.Status(); s.LastError != "" || s.Changes != 4 {
		t.Fatalf("after the fix: %+v, want 4 changes and no error", s)
	}
}

func TestFileProviderFollowsAJSONFileObjectOrArray(t *testing.T) {
	file := filepath.Join(t.TempDir(), "servers.json")
	discoverytest.WriteFile(t, file, `{"servers": ["127.0.0.1:9001"]}`)
	rn := run(t, config.Discovery{Provider: "file", File: file}, false)
	rn.follows(t, fileFollow, "a JSON object", "127.0.0.1:9001")
	discoverytest.RenameOver(t, file, "[\n  \"127.0.0.1:9001\",\n  \"127.0.0.1:9002\"\n]\n")
	rn.follows(t, fileFollow, "a JSON array", "127.0.0.1:9001", "127.0.0.1:9002")
	discoverytest.WriteFile(t, file, `{"servers": ["127.0.0.1:9003"], "weights": [1]}`)
	testkit.Eventually(t, "the error", 5*time.Second, func() bool { return rn.Status().Errors == 1 })
	if logLine(rn.log(), file+`: not a JSON server list: json: unknown field "weights"`) == "" {
		t.Errorf("no log line naming the file and the field:\n%s", rn.log())
	}
	if l := rn.List(); !slices.Equal(l, []string{"127.0.0.1:9001", "127.0.0.1:9002"}) {
		t.Fatalf("after an invalid JSON edit: %v", l)
	}
}

func TestFileProviderKeepsTheSeedWhileTheFileIsMissingAndTheLastListWhenItIsDeleted(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cx-servers.toml")
	rn := run(t, config.Discovery{Provider: "file", File: file}, false, "127.0.0.1:9001")
	testkit.Eventually(t, "the missing file's error", 5*time.Second, func() bool { return rn.Status().Errors == 1 })
	if s := rn.Status(); s.Servers != nil || rn.r.got() != nil || !strings.Contains(s.LastError, file) || !strings.Contains(s.LastError, "no such file") {
		t.Fatalf("with the file missing the seed serves: %+v, changes %q", s, rn.r.got())
	}
	if logLine(rn.log(), "discovery: pool p: file: open "+file+": no such file or directory (keeping the last list)") == "" {
		t.Errorf("no log line naming the missing file:\n%s", rn.log())
	}

	// Written later: followed (the seed is replaced).
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers("127.0.0.1:9002"))
	rn.follows(t, fileFollow, "the file once written", "127.0.0.1:9002")
	if got := rn.r.got(); !slices.Equal(got, []string{"file: 1 server (added 127.0.0.1:9002; removed 127.0.0.1:9001)"}) {
		t.Fatalf("changes %q", got)
	}

	// Deleted: an error, the last list stays (only `servers = []` empties a pool).
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the deleted file's error", 5*time.Second, func() bool { return rn.Status().Errors == 2 })
	if l := rn.List(); !slices.Equal(l, []string{"127.0.0.1:9002"}) {
		t.Fatalf("after the file was deleted: %v", l)
	}
}
