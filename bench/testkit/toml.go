package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Config builds a TOML config file for a test, table by table, in the order the calls are made:
//
//	var c testkit.Config
//	c.Table("frontend").Set("listen", addr)
//	c.Table("pools.platform").Set("servers", addrs).Set("queue_timeout", 2*time.Second)
//	c.Table("pools.platform.check").Set("interval", "200ms")
//	c.Array("routes").Set("pool", "platform")
//	dir := testkit.WriteFiles(t, map[string]string{"fairlead.toml": c.String()})
//
// Values are written as TOML: a string quoted, a time.Duration as its quoted Go form ("1.5s"), a
// []string as an array of strings, numbers and booleans as they are, and Raw verbatim.
type Config struct {
	tables []*Table
}

// Table is one [table] or [[array]] entry of a Config, with its keys in the order they were set.
type Table struct {
	header string // "[frontend]", "[[routes]]"; "" for the keys before the first table
	lines  []string
	subs   []*Table
}

// Raw is a value written as it is: an inline table, an array of numbers, a value under test.
type Raw string

// Table returns the table name ("pools.platform.check"), added at the end the first time it is asked
// for and the same table after.
func (c *Config) Table(name string) *Table {
	header := "[" + name + "]"
	for _, t := range c.tables {
		if t.header == header {
			return t
		}
	}
	t := &Table{header: header}
	c.tables = append(c.tables, t)
	return t
}

// Array adds a new entry of the array of tables name ("routes") at the end and returns it.
func (c *Config) Array(name string) *Table {
	t := &Table{header: "[[" + name + "]]"}
	c.tables = append(c.tables, t)
	return t
}

// String is the config as TOML.
func (c *Config) String() string {
	var b strings.Builder
	for _, t := range c.tables {
		t.write(&b)
	}
	return b.String()
}

// Set writes key = v in the table and returns the table. key is quoted when it is not a bare key
// (a server address as the key of a [pools.X.names] table).
func (t *Table) Set(key string, v any) *Table {
	t.lines = append(t.lines, Key(key)+" = "+Value(v))
	return t
}

// Lines writes raw, lines of TOML keys as text (a test's extra keys, "" for none), in the table and
// returns the table.
func (t *Table) Lines(raw string) *Table {
	if raw = strings.TrimSpace(raw); raw != "" {
		t.lines = append(t.lines, raw)
	}
	return t
}

// Table returns a sub-table written right after t ([routes.auth] of this [[routes]] entry); name is
// the full name ("routes.auth"). Asked for again, it is the same sub-table.
func (t *Table) Table(name string) *Table {
	header := "[" + name + "]"
	for _, s := range t.subs {
		if s.header == header {
			return s
		}
	}
	s := &Table{header: header}
	t.subs = append(t.subs, s)
	return s
}

func (t *Table) write(b *strings.Builder) {
	if t.header != "" {
		b.WriteString(t.header + "\n")
	}
	for _, l := range t.lines {
		b.WriteString(l + "\n")
	}
	for _, s := range t.subs {
		s.write(b)
	}
}

// Key is k as a TOML key: bare when it can be, else quoted.
func Key(k string) string {
	if k == "" {
		return `""`
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return Quote(k)
		}
	}
	return k
}

// Value is v as a TOML value (see Config).
func Value(v any) string {
	switch v := v.(type) {
	case Raw:
		return string(v)
	case string:
		return Quote(v)
	case time.Duration:
		return Quote(v.String())
	case []string:
		return Strings(v...)
	case bool, int, int64, int32, uint, uint64, uint32, float64:
		return fmt.Sprint(v)
	default:
		panic(fmt.Sprintf("testkit: no TOML form for %T", v))
	}
}

// Strings is a TOML array of strings: ["a", "b"].
func Strings(ss ...string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Quote is s as a TOML basic string (Go's strconv.Quote writes escapes TOML does not have).
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError, r < 0x20, r == 0x7f:
			b.WriteString(`\u` + fmt.Sprintf("%04X", r))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// WriteFiles writes files (name → content) into a new temporary directory of the test and returns it:
// a config directory, as conf.d is.
func WriteFiles(t T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
