package testkit

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func TestConfigWritesTablesArraysAndValuesAsTOML(t *testing.T) {
	var c Config
	c.Table("frontend").Set("listen", "127.0.0.1:1")
	c.Table("pools.platform").Set("servers", []string{"127.0.0.1:2", "127.0.0.1:3"}).Set("queue_timeout", 1500*time.Millisecond)
	c.Table("pools.platform.names").Set("127.0.0.1:2", "one")
	c.Table("pools.platform.check").Set("fall", 3).Set("tls", true).Set("headers", Raw(`{ X = "y" }`))
	r := c.Array("routes").Set("pool", "platform").Set("paths", []string{`/a"b\c`})
	r.Table("routes.auth").Set("header", "appKey")
	c.Array("routes").Set("pool", "other")
	c.Table("frontend").Set("drain_timeout", "5s") // the same table again

	want := `[frontend]
listen = "127.0.0.1:1"
drain_timeout = "5s"
[pools.platform]
servers = ["127.0.0.1:2", "127.0.0.1:3"]
queue_timeout = "1.5s"
[pools.platform.names]
"127.0.0.1:2" = "one"
[pools.platform.check]
fall = 3
tls = true
headers = { X = "y" }
[[routes]]
pool = "platform"
paths = ["/a\"b\\c"]
[routes.auth]
header = "appKey"
[[routes]]
pool = "other"
`
	if got := c.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	var parsed map[string]any
	if _, err := toml.Decode(c.String(), &parsed); err != nil {
		t.Fatalf("not TOML: %v", err)
	}
	routes := parsed["routes"].([]map[string]any)
	if len(routes) != 2 || routes[0]["auth"].(map[string]any)["header"] != "appKey" || routes[0]["paths"].([]any)[0] != `/a"b\c` {
		t.Fatalf("parsed back as %v", parsed)
	}
}

func TestQuoteEscapesWhatTOMLNeeds(t *testing.T) {
	for _, s := range []string{"plain", `q"uote`, `back\slash`, "new\nline\ttab", "ctl\x01\x7f", "ünïcode"} {
		var v struct{ K string }
		if _, err := toml.Decode("K = "+Quote(s), &v); err != nil || v.K != s {
			t.Errorf("%q: quoted %s, parsed back as %q (%v)", s, Quote(s), v.K, err)
		}
	}
}

func TestWriteFilesWritesEachFileIntoANewDirectory(t *testing.T) {
	files := map[string]string{"10-a.toml": "a = 1\n", "20-b.toml": "b = 2\n"}
	dir := WriteFiles(t, files)
	got := map[string]string{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		got[e.Name()] = string(b)
	}
	if !reflect.DeepEqual(got, files) {
		t.Fatalf("%v", got)
	}
}
