package config

import (
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A key's name is written once, in its field's toml tag: defaults and validation find the dotted key of
// a field ("pools.platform.check.interval") from a pointer to it, so that the file that set it can be
// named without the name being typed again.

// keyOf returns the dotted key of the field that field (a pointer into c) points to. It panics when
// field is not inside c: that is a mistake in this package, not in a config file.
func (c *Config) keyOf(field any) string {
	fv := reflect.ValueOf(field)
	if fv.Kind() != reflect.Pointer || fv.IsNil() {
		panic("config: keyOf needs a pointer into the Config")
	}
	if key, ok := keyIn(reflect.ValueOf(c).Elem(), fv.Pointer(), fv.Type().Elem(), nil); ok {
		return key
	}
	panic("config: keyOf: the field is not inside the Config")
}

// keyIn looks for the field at address addr of type t inside v, whose key is path.
func keyIn(v reflect.Value, addr uintptr, t reflect.Type, path []string) (string, bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return "", false
		}
		return keyIn(v.Elem(), addr, t, path)
	case reflect.Map:
		for _, mk := range v.MapKeys() {
			if e := v.MapIndex(mk); e.Kind() == reflect.Pointer {
				if key, ok := keyIn(e, addr, t, append(path[:len(path):len(path)], mk.String())); ok {
					return key, true
				}
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			key := append(path[:len(path):len(path)], strconv.Itoa(i))
			if e := v.Index(i); e.Type() == t && e.Addr().Pointer() == addr {
				return strings.Join(key, "."), true
			}
			if key, ok := keyIn(v.Index(i), addr, t, key); ok {
				return key, true
			}
		}
	case reflect.Struct:
		if v.Type() == durationType {
			return "", false
		}
		for i := 0; i < v.NumField(); i++ {
			name := strings.Split(v.Type().Field(i).Tag.Get("toml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			f := v.Field(i)
			key := append(path[:len(path):len(path)], name)
			if f.Type() == t && f.Addr().Pointer() == addr {
				return strings.Join(key, "."), true
			}
			if k, ok := keyIn(f, addr, t, key); ok {
				return k, true
			}
		}
	}
	return "", false
}

var durationType = reflect.TypeOf(Duration{})

// set reports whether a file set the key of field (a pointer into c).
func (c *Config) set(field any) bool { return c.isSet(c.keyOf(field)) }

// def gives *field the default v unless a file set its key.
func def[T any](c *Config, field *T, v T) {
	if !c.set(field) {
		*field = v
	}
}

// defDuration gives a duration the default v unless a file set its key.
func defDuration(c *Config, d *Duration, v time.Duration) {
	if !c.set(d) {
		d.D = v
	}
}
