package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// FuzzLoadConfig writes arbitrary bytes as a conf.d file into a new directory and loads it, twice: alone,
// and after copies of the shipped conf.d files (so that it overrides keys of a valid config, as an
// operator's drop-in file does). The loader must never panic, and give either
//   - a config that passes validation again and that New builds pools and routes from, or
//   - a *Error whose every problem is one line starting with the file it is about ("FILE: "; the
//     fuzzed file when it is alone or does not parse), that never shows a check credential, and that is
//     the same when the same files are loaded again (fairlead -check lists them in a stable order; only
//     checked when the fuzzed file decodes into the schema: the TOML decoder reports the first type
//     mismatch it meets, in map order).
//
// The seed corpus is every file of conf.d/ plus broken ones; inputs that failed are kept under
// testdata/fuzz/FuzzLoadConfig/ and run with the other tests.
func FuzzLoadConfig(f *testing.F) {
	shipped, _ := filepath.Glob(filepath.Join("..", "..", "conf.d", "*.toml"))
	base := map[string][]byte{}
	for _, file := range shipped {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		base[filepath.Base(file)] = b
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"# only a comment\n",
		minimalConfig,
		"[frontend\n",
		"[frontend]\nlisen = 1\n[pools.platform.check]\nfall = 0\n",
		"[pools.platform]\nservers = \"127.0.0.1:1\"\n",
		"[pools.platform]\nservers = []\n[[routes]]\npool = \"nope\"\n",
		"[pools.p]\nservers = [\"127.0.0.1:99999\", \"127.0.0.1:0\", \"127.0.0.1:1\", \"127.0.0.1:1\"]\nbackups = [\"127.0.0.1:1\"]\n",
		"[pools.p.check]\ninterval = \"15x\"\ninterval_max = \"-1s\"\ncredentials = \"not base64!\"\n",
		"[pools.p.check]\ncredentials = \"c2VjcmV0Cg==\"\n",
		"[pools.cx]\nbalance = \"sticky\"\nservers = [\"h:1\"]\n[pools.cx.sticky]\nkeys = [\"header:Cookie\", \"source\", \"source\"]\ncookie = \"X\"\n",
		"[pools.p]\nbalance = \"roundrobin\"\nservers = [\"a:1\", \"b:2\"]\nhigh_watermark = -1\nmultipart_header = \"bad header\"\n[pools.p.names]\n\"a:1\" = \"x\"\n\"b:2\" = \"x\"\n\"c:3\" = \"\\\"\"\n",
		"[frontend]\nmax_conns = 99999999999999999999\n",
		"[global]\nstart = \"fast\"\nlog_format = \"xml\"\n[admin]\nlisten = \"0.0.0.0:8404\"\nuser = \"a:b\"\n",
		"[pools.p]\nservers = [\"127.0.0.1:1\"]\n[pools.p]\nservers = [\"127.0.0.1:2\"]\n",
		"[[routes]]\npool = \"p\"\npaths = [\"x\", \"/y\"]\n[routes.auth]\nheader = \"X-Key\"\n",
		"pools = 1\nroutes = [1, 2]\n",
		"\x00\xff\xfe[\"\n",
	} {
		f.Add([]byte(s))
	}

	// Two directories for every input (the fuzz function runs one input at a time in each process):
	// the fuzzed file alone, and the fuzzed file after the shipped ones.
	alone := f.TempDir()
	over := f.TempDir()
	var files []string
	for name, b := range base {
		// The shipped files name their demo files relative to the repository's root (`make run` runs
		// fairlead there); the copies name them from here, the package's directory.
		b = bytes.ReplaceAll(b, []byte(`"conf.d/`), []byte(`"../../conf.d/`))
		if err := os.WriteFile(filepath.Join(over, name), b, 0o600); err != nil {
			f.Fatal(err)
		}
		files = append(files, filepath.Join(over, name))
	}
	files = append(files, filepath.Join(over, "99-fuzz.toml"))
	slices.Sort(files)

	f.Fuzz(func(t *testing.T, data []byte) {
		var doc map[string]any
		_, tomlErr := toml.Decode(string(data), &doc)
		// Decoding into the schema stops at the first type mismatch, and which one comes first depends
		// on map order: only a file that decodes has problems that must come in a stable order.
		_, typedErr := toml.Decode(string(data), new(Config))
		file := filepath.Join(alone, "50-fuzz.toml")
		writeTestFile(t, file, string(data))
		checkLoad(t, alone, []string{file}, doc, tomlErr, typedErr == nil)
		if tomlErr != nil {
			return // after the shipped files it would only add their (valid) config to the same error
		}
		writeTestFile(t, files[len(files)-1], string(data))
		checkLoad(t, over, files, doc, nil, typedErr == nil)
	})
}

// checkLoad loads dir, whose files are files (sorted; the last one is the fuzzed one, decoded by the
// TOML package into doc, or not: tomlErr), and checks the result (see FuzzLoadConfig); stable: whether
// the same problems must come again in the same order.
func checkLoad(t *testing.T, dir string, files []string, doc map[string]any, tomlErr error, stable bool) {
	t.Helper()
	fuzzed := files[len(files)-1]
	cfg, err := Load(dir)
	if err == nil {
		if !slices.Equal(cfg.Files, files) {
			t.Fatalf("config read from %q, want %q", cfg.Files, files)
		}
		return
	}
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) == 0 {
		t.Fatalf("Load error %#v: want a *Error listing problems", err)
	}
	namesFuzzed := false
	for _, p := range ce.Problems {
		if strings.ContainsAny(p, "\r\n") {
			t.Fatalf("problem %q spans lines: each line of the error must name the file and the key", p)
		}
		i := slices.IndexFunc(files, func(f string) bool { return strings.HasPrefix(p, f+": ") })
		if i < 0 || len(files) == 1 && i != 0 {
			t.Fatalf("problem %q does not start with the file it is about (one of %q)", p, files)
		}
		namesFuzzed = namesFuzzed || files[i] == fuzzed
	}
	if tomlErr != nil && !namesFuzzed {
		t.Fatalf("%s is not TOML (%v), but no problem names it:\n%s", fuzzed, tomlErr, err)
	}
	for _, cred := range credentials(doc) {
		if strings.Contains(err.Error(), cred) && !strings.Contains(dir, cred) {
			t.Fatalf("the error shows the credentials %q:\n%s", cred, err)
		}
	}
	if _, again := Load(dir); again == nil || stable && again.Error() != err.Error() {
		t.Fatalf("loading the same files again gave another answer:\n%v\nthen:\n%v", err, again)
	}
}

// credentials returns the check credentials of doc that a problem could not show by accident: at least
// 8 base64 characters including one that is not a letter, appearing in no other key or value.
func credentials(doc map[string]any) []string {
	pools, _ := doc["pools"].(map[string]any)
	var creds []string
	for _, p := range pools {
		pool, _ := p.(map[string]any)
		ck, _ := pool["check"].(map[string]any)
		if c, ok := ck["credentials"].(string); ok && credLike.MatchString(c) && strings.IndexFunc(c, notLetter) >= 0 {
			creds = append(creds, c)
		}
	}
	var other []string
	var walk func(v any, cred bool)
	walk = func(v any, cred bool) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				other = append(other, k)
				walk(e, k == "credentials")
			}
		case []any:
			for _, e := range v {
				walk(e, false)
			}
		case []map[string]any:
			for _, e := range v {
				walk(e, false)
			}
		default:
			if !cred {
				other = append(other, fmt.Sprint(v))
			}
		}
	}
	walk(doc, false)
	return slices.DeleteFunc(creds, func(c string) bool {
		return slices.ContainsFunc(other, func(o string) bool { return strings.Contains(o, c) })
	})
}

var credLike = regexp.MustCompile(`^[A-Za-z0-9+/=]{8,}$`)

func notLetter(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') }
