package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestEveryConfigKeyIsDocumented walks the config schema: every key must appear in README.md (as `key`)
// and in conf.d/ (as "key =", commented or not), so that a new key cannot ship undocumented.
func TestEveryConfigKeyIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../conf.d/*.toml")
	var confd strings.Builder
	for _, f := range files {
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
			if f.Type.Kind() == reflect.Map {
				key += ".NAME"
			}
			ft := f.Type
			for ft.Kind() == reflect.Map || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			table := ft.Kind() == reflect.Struct && ft != reflect.TypeOf(Duration{})
			switch {
			case table:
				if !strings.Contains(string(readme), "["+key+"]") {
					t.Errorf("config table [%s] has no section in README.md", key)
				}
				walk(ft, key+".")
			case f.Type.Kind() == reflect.Map:
				// A table of the operator's own keys ([pools.NAME.names]).
				if key = path + name; !strings.Contains(string(readme), "["+key+"]") {
					t.Errorf("config table [%s] has no section in README.md", key)
				}
				if !regexp.MustCompile(`\[` + strings.ReplaceAll(regexp.QuoteMeta(key), "NAME", `[^.\]]+`) + `\]`).MatchString(confd.String()) {
					t.Errorf("config table [%s] is not shown in conf.d/", key)
				}
			default:
				if !strings.Contains(string(readme), "`"+name+"`") {
					t.Errorf("config key %s is not documented in README.md", key)
				}
				if !strings.Contains(confd.String(), name+" =") {
					t.Errorf("config key %s is not shown in conf.d/", key)
				}
			}
		}
	}
	walk(reflect.TypeOf(Config{}), "")
}
