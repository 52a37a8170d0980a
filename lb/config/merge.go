package config

// Merging conf.d: every file is decoded on its own and merged key by key over the files before it, and
// every key remembers the file that set it so that errors name the file and the key.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read config: %w", path, err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.toml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.toml files", path)
	}
	sort.Strings(files)
	return files, nil
}

// mergeFile decodes one file on its own (so type errors and unknown keys name this file and its lines)
// and merges every key it defines over what earlier files set.
func (c *Config) mergeFile(file string) []string {
	var fc Config
	data, err := os.ReadFile(file)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", file, err)}
	}
	sum := sha256.Sum256(data)
	c.Digest += file + ":" + hex.EncodeToString(sum[:]) + ";"
	md, err := toml.Decode(string(data), &fc)
	if err != nil {
		return decodeProblems(file, data, err)
	}
	var problems []string
	for _, k := range md.Undecoded() {
		problems = append(problems, fmt.Sprintf("%s: %s: unknown key", file, k))
	}
	merge(reflect.ValueOf(c).Elem(), reflect.ValueOf(&fc).Elem(), nil, &md, file, c.origin)
	for _, k := range md.Keys() {
		if len(k) >= 2 && k[0] == "pools" && !slices.Contains(c.PoolOrder, k[1]) {
			c.PoolOrder = append(c.PoolOrder, k[1])
		}
	}
	return problems
}

// readFile reads a file the config names at key (a secret, a certificate, a keys file) and folds its
// contents into the config digest, as mergeFile does for the *.toml files: a reload after only that file
// changed (a secret rotated in place) applies it.
func (c *Config) readFile(key, file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	c.Digest += key + "=" + file + ":" + hex.EncodeToString(sum[:]) + ";"
	if !slices.Contains(c.filesRead, file) {
		c.filesRead = append(c.filesRead, file)
	}
	return data, nil
}

// decodeProblems lists the type errors of a file that did not decode. The decoder stops at its first
// error, and which one it meets first depends on map order; so the file is decoded again table by table
// and key by key in name order, and every error is listed (then the decoder's own if it was not among
// them): the same file always gives the same problems, all of them.
func decodeProblems(file string, data []byte, err error) []string {
	var problems []string
	add := func(e error) {
		p := fmt.Sprintf("%s: %s", file, strings.TrimPrefix(e.Error(), "toml: "))
		if !slices.Contains(problems, p) {
			problems = append(problems, p)
		}
	}
	var top map[string]toml.Primitive
	if md, rerr := toml.Decode(string(data), &top); rerr == nil {
		decodeKeys(md, nil, top, reflect.TypeOf(Config{}), add)
	}
	if len(problems) == 0 {
		add(err)
	}
	return problems
}

// decodeKeys decodes each of the keys of a table (in name order) into its field of t, a struct type, or
// into t's element type when t is a map of tables ([pools.NAME]); unknown keys are left to the
// undecoded-key check.
func decodeKeys(md toml.MetaData, path []string, table map[string]toml.Primitive, t reflect.Type, add func(error)) {
	for _, key := range slices.Sorted(maps.Keys(table)) {
		var ft reflect.Type
		if t.Kind() == reflect.Map {
			ft = t.Elem()
		} else {
			for i := 0; i < t.NumField(); i++ {
				if strings.Split(t.Field(i).Tag.Get("toml"), ",")[0] == key {
					ft = t.Field(i).Type
				}
			}
		}
		if ft == nil {
			continue
		}
		decodeValue(md, append(slices.Clip(path), key), table[key], ft, add)
	}
}

// decodeValue decodes one value into a new value of type t, going into tables key by key.
func decodeValue(md toml.MetaData, path []string, prim toml.Primitive, t reflect.Type, add func(error)) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	table := t.Kind() == reflect.Struct && t != reflect.TypeOf(Duration{}) ||
		t.Kind() == reflect.Map && (t.Elem().Kind() == reflect.Struct || t.Elem().Kind() == reflect.Pointer)
	if table {
		var sub map[string]toml.Primitive
		if err := md.PrimitiveDecode(prim, &sub); err != nil {
			add(err)
			return
		}
		if len(sub) > 0 { // (a value that is not a table decodes as an empty one: decoded whole below)
			decodeKeys(md, path, sub, t, add)
			return
		}
	}
	if err := md.PrimitiveDecode(prim, reflect.New(t).Interface()); err != nil {
		add(err)
	}
}

// merge copies into dst every field of src that the file's metadata says was defined, recording the
// file of each key in origin. Tables merge key by key, [[routes]] append, other values replace.
func merge(dst, src reflect.Value, path []string, md *toml.MetaData, file string, origin map[string]string) {
	t := src.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("toml"), ",")[0]
		if name == "" || name == "-" {
			continue
		}
		key := append(append([]string(nil), path...), name)
		if !md.IsDefined(key...) {
			continue
		}
		s, d := src.Field(i), dst.Field(i)
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Duration{}):
			origin[strings.Join(key, ".")] = file
			merge(d, s, key, md, file, origin)
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
			// An optional table ([relays.NAME.auth]): merged key by key as any table.
			origin[strings.Join(key, ".")] = file
			if s.IsNil() {
				continue
			}
			if d.IsNil() {
				d.Set(reflect.New(f.Type.Elem()))
			}
			merge(d.Elem(), s.Elem(), key, md, file, origin)
		case f.Type.Kind() == reflect.Map:
			origin[strings.Join(key, ".")] = file
			if d.IsNil() {
				d.Set(reflect.MakeMap(f.Type))
			}
			if f.Type.Elem().Kind() != reflect.Pointer {
				// A map of plain values ([pools.NAME.names]): entries replace entries.
				for _, mk := range s.MapKeys() {
					d.SetMapIndex(mk, s.MapIndex(mk))
					origin[strings.Join(append(append([]string(nil), key...), mk.String()), ".")] = file
				}
				continue
			}
			for _, mk := range s.MapKeys() {
				dv := d.MapIndex(mk)
				if !dv.IsValid() {
					dv = reflect.New(f.Type.Elem().Elem())
					d.SetMapIndex(mk, dv)
				}
				sub := append(append([]string(nil), key...), mk.String())
				origin[strings.Join(sub, ".")] = file
				merge(dv.Elem(), s.MapIndex(mk).Elem(), sub, md, file, origin)
			}
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			// Arrays of tables ([[routes]]) accumulate across files; each entry remembers its file.
			for j := 0; j < s.Len(); j++ {
				origin[fmt.Sprintf("%s.%d", strings.Join(key, "."), d.Len())] = file
				d.Set(reflect.Append(d, s.Index(j)))
			}
		default:
			origin[strings.Join(key, ".")] = file
			d.Set(s)
		}
	}
}

// FileOf returns the file that set a dotted key ("frontend.listen"), or "" when no file set it.
func (c *Config) FileOf(key string) string { return c.origin[key] }

// isSet tells whether some file set the dotted key.
func (c *Config) isSet(key string) bool { _, ok := c.origin[key]; return ok }

// at formats a problem with the file that set key (or the closest enclosing key that some file set).
func (c *Config) at(key, format string, args ...any) string {
	return fmt.Sprintf("%s: %s: %s", c.fileAt(key), key, fmt.Sprintf(format, args...))
}

// fileAt returns the file that set key, or the nearest table above it, else the first file.
func (c *Config) fileAt(key string) string {
	for k := key; k != ""; {
		if f, ok := c.origin[k]; ok {
			return f
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	if len(c.Files) > 0 {
		return c.Files[0]
	}
	return ""
}
