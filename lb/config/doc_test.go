package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// The shipped conf.d/ is documentation too: it shows every key of the schema (commented or not), and a
// key it shows commented out under a table that is in force claims the code's default. A commented-out
// table is an example: its keys show values to try, not defaults. (What each key means is in
// conf.d/REFERENCE.md, which TestConfigReferenceIsFresh keeps fresh and complete.)

// confdFiles returns the shipped *.toml files (absolute paths) in the order fairlead merges them.
func confdFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../conf.d/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no conf.d/*.toml: %v", err)
	}
	for i, f := range files {
		if files[i], err = filepath.Abs(f); err != nil {
			t.Fatal(err)
		}
	}
	return files // Glob sorts, as the merge does
}

func TestEveryConfigKeyIsShownInConfD(t *testing.T) {
	var confd strings.Builder
	for _, f := range confdFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		confd.Write(b)
	}
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name := strings.Split(f.Tag.Get("toml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			key := path + name
			ft := f.Type
			for ft.Kind() == reflect.Map || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(Duration{}):
				if f.Type.Kind() == reflect.Map {
					key += ".NAME"
				}
				walk(ft, key+".")
			case f.Type.Kind() == reflect.Map:
				// A table of the operator's own keys ([pools.NAME.names]).
				if !regexp.MustCompile(`\[` + strings.ReplaceAll(regexp.QuoteMeta(key), "NAME", `[^.\]]+`) + `\]`).MatchString(confd.String()) {
					t.Errorf("config table [%s] is not shown in conf.d/", key)
				}
			default:
				if !strings.Contains(confd.String(), name+" =") {
					t.Errorf("config key %s is not shown in conf.d/", key)
				}
			}
		}
	}
	walk(reflect.TypeOf(Config{}), "")
}

var (
	liveTable      = regexp.MustCompile(`^\s*(\[\[?)\s*([A-Za-z0-9_.-]+)\s*\]\]?\s*(#.*)?$`)
	commentedTable = regexp.MustCompile(`^\s*#\s*\[\[?\s*[A-Za-z0-9_.-]+\s*\]\]?\s*(#.*)?$`)
	commentedKey   = regexp.MustCompile(`^\s*#\s*([a-z_]+)\s*=\s*(.+)$`)
)

func TestConfDShowsTheDefaultsTheCodeApplies(t *testing.T) {
	files := confdFiles(t)
	// From the repository's root, as `fairlead -config conf.d` runs there.
	t.Chdir("../..")
	c, err := Load("conf.d")
	if err != nil {
		t.Fatalf("the shipped conf.d does not load: %v", err)
	}
	arrays := map[string]int{} // [[table]] path → entries seen so far, across files as they merge
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var table reflect.Value // the struct of the live table the lines are in; invalid in an example
		var tableName string
		for n, line := range strings.Split(string(b), "\n") {
			at := fmt.Sprintf("%s:%d", filepath.Base(file), n+1)
			if m := liveTable.FindStringSubmatch(line); m != nil {
				tableName = m[2]
				if m[1] == "[[" {
					arrays[tableName]++
				}
				table = tableOf(c, tableName, arrays)
				continue
			}
			if commentedTable.MatchString(line) {
				table = reflect.Value{} // an example: its keys are not defaults
				continue
			}
			m := commentedKey.FindStringSubmatch(line)
			if m == nil || !table.IsValid() {
				continue
			}
			key, shown := m[1], m[2]
			idx, ok := fieldByKey(table.Type(), key)
			if !ok {
				t.Errorf("%s: %s is not a key of [%s]", at, key, tableName)
				continue
			}
			fresh := reflect.New(table.Type())
			if _, err := toml.Decode(key+" = "+shown, fresh.Interface()); err != nil {
				t.Errorf("%s: [%s] %s: cannot read the value shown: %v", at, tableName, key, err)
				continue
			}
			checked++
			if got, want := fresh.Elem().FieldByIndex(idx), table.FieldByIndex(idx); !sameValue(got, want) {
				t.Errorf("%s: [%s] %s is shown as %s, but the code's default is %s", at, tableName, key,
					strings.TrimSpace(strings.SplitN(shown, " #", 2)[0]), tomlValue(want))
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d commented keys were compared: is the parsing of conf.d broken?", checked)
	}
}

// tableOf is the struct that a live table header of conf.d names in the loaded c ("pools.cxserver.check",
// "routes", "relays.appconfig.auth"), or an invalid Value when it names no struct.
func tableOf(c *Config, name string, arrays map[string]int) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	segs := strings.Split(name, ".")
	for i := 0; i < len(segs); i++ {
		idx, ok := fieldByKey(v.Type(), segs[i])
		if !ok {
			return reflect.Value{}
		}
		v = v.FieldByIndex(idx)
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Map || v.Kind() == reflect.Slice {
			switch v.Kind() {
			case reflect.Pointer:
				if v.IsNil() {
					return reflect.Value{}
				}
				v = v.Elem()
			case reflect.Map:
				if i++; i >= len(segs) || v.Type().Key().Kind() != reflect.String {
					return reflect.Value{}
				}
				v = v.MapIndex(reflect.ValueOf(segs[i]))
				if !v.IsValid() {
					return reflect.Value{}
				}
			case reflect.Slice:
				n := arrays[strings.Join(segs[:i+1], ".")]
				if n == 0 || n > v.Len() {
					return reflect.Value{}
				}
				v = v.Index(n - 1)
			}
		}
	}
	if v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v
}

// fieldByKey finds the field of struct type typ whose TOML key is key.
func fieldByKey(typ reflect.Type, key string) ([]int, bool) {
	if typ.Kind() != reflect.Struct {
		return nil, false
	}
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("toml"), ","); name == key {
			return []int{i}, true
		}
	}
	return nil, false
}

// sameValue compares a value shown in conf.d with the loaded one: durations after parsing ("60s" is
// "1m"), pointers by what they point to, an empty list as no list.
func sameValue(a, b reflect.Value) bool {
	if a.Type() == reflect.TypeOf(Duration{}) {
		return a.Interface().(Duration).D == b.Interface().(Duration).D
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// TestTheDemoConfigLoads: `make run` runs fairlead with bench/demo.d/ (not installed; conf.d/ is the
// production starting point), whose 45-appconfig.toml names its demo key files relative to the
// repository's root, where bench/run.sh runs fairlead.
func TestTheDemoConfigLoads(t *testing.T) {
	t.Chdir("../..")
	c, err := Load("bench/demo.d")
	if err != nil {
		t.Fatalf("bench/demo.d does not load: %v", err)
	}
	if len(c.Relays) != 2 || c.Pools["platform"] == nil || c.Pools["cxserver"] == nil {
		t.Errorf("bench/demo.d: relays %d, pools %v: want the two relays, the platform and the cxserver pools", len(c.Relays), len(c.Pools))
	}
}
