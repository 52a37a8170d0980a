package discovery

// The file discovery provider (issue #12): a list of servers in a file that something else writes (a
// deploy tool, a configuration management run, a sidecar, a mounted Kubernetes ConfigMap), re-read when
// it changes. The file need not exist when the config is loaded: until it can be read the pool keeps
// its seed servers.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fsnotify/fsnotify"
)

// FileDebounce is how long the file's directory must stay quiet after an event before the file is read:
// an editor's save (truncate, write; or write a temporary file and rename it over) is one read.
const FileDebounce = 200 * time.Millisecond

// filePoll is how often the file is read without an event: file systems that report no change (NFS,
// some container mounts), and a directory that did not exist when the watch began.
var filePoll = 10 * time.Second

// fileProvider watches one file.
type fileProvider struct {
	path string // absolute
	pool string
	logf func(string, ...any)
}

func newFileProvider(dc config.Discovery, o Options) (Provider, error) {
	path, err := filepath.Abs(dc.File)
	if err != nil {
		return nil, fmt.Errorf("file %s: %v", dc.File, err)
	}
	return &fileProvider{path: path, pool: o.Pool, logf: o.Logf}, nil
}

// Watch reads the file at once, then after every change (debounced) and every filePoll. Only a change
// is reported: the same contents (or the same error) read again are not, so an unrelated event in the
// directory or the poll adds nothing to the counters or the log.
func (p *fileProvider) Watch(ctx context.Context, found func([]string), failed func(error)) {
	var events <-chan fsnotify.Event
	var werrs <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		p.logf("discovery: pool %s: file: cannot watch %s: %v (read every %s instead)", p.pool, p.path, err, filePoll)
	} else {
		defer w.Close()
		events, werrs = w.Events, w.Errors
	}
	// The file's directory is watched, not the file: editors replace a file by renaming another over it
	// (the watch of a file would follow the old inode), and Kubernetes updates a ConfigMap by swapping a
	// symlink in that directory. A symlinked file's target directory is watched too.
	watched := map[string]bool{}
	watchDirs := func() {
		if w == nil {
			return
		}
		dirs := []string{filepath.Dir(p.path)}
		if real, err := filepath.EvalSymlinks(p.path); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
		for _, d := range dirs {
			if !watched[d] && w.Add(d) == nil {
				watched[d] = true
			}
		}
	}

	var last []byte // the contents last read, nil before
	var lastErr string
	read := func() {
		watchDirs()
		data, err := os.ReadFile(p.path)
		if err == nil {
			if last != nil && bytes.Equal(data, last) {
				return
			}
			last = data
			var list []string
			if list, err = parseServerFile(p.path, data); err == nil {
				lastErr = ""
				found(list)
				return
			}
			err = fmt.Errorf("%s: %w", p.path, err)
		} else {
			last = nil // an error of its own (os errors name the file)
		}
		if msg := err.Error(); msg != lastErr {
			lastErr = msg
			failed(err)
		}
	}

	read()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	poll := time.NewTicker(filePoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if watched[e.Name] && e.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				delete(watched, e.Name) // the directory itself went: watched again once it is back (poll)
			}
			debounce.Reset(FileDebounce)
		case err, ok := <-werrs:
			if !ok {
				werrs = nil
				continue
			}
			p.logf("discovery: pool %s: file: watching %s: %v", p.pool, p.path, err)
		case <-debounce.C:
			read()
		case <-poll.C:
			read()
		}
	}
}

// parseServerFile returns the servers a discovery file lists: TOML `servers = ["host:port", ...]`, JSON
// `{"servers": ["host:port", ...]}` or `["host:port", ...]`. The extension (.toml, .json) says which;
// without one of those, a file whose first character is '{' or '[' is JSON, any other TOML. Anything
// else in the file (another key, a field, a second value) is an error, and so is a file without a list
// (an empty file: a truncated write must not empty the pool); `servers = []` is an empty list.
func parseServerFile(path string, data []byte) ([]string, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	format := strings.ToLower(filepath.Ext(path))
	if format != ".toml" && format != ".json" {
		format = ".toml"
		if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
			format = ".json"
		}
	}
	var list []string
	if format == ".toml" {
		var v struct {
			Servers *[]string `toml:"servers"`
		}
		md, err := toml.Decode(string(data), &v)
		if err != nil {
			return nil, fmt.Errorf("not a TOML server list: %v", err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, fmt.Errorf("unknown key %s (want only servers = [\"host:port\", ...])", und[0])
		}
		if v.Servers == nil {
			return nil, errors.New("no servers key (want servers = [\"host:port\", ...])")
		}
		list = *v.Servers
	} else {
		var err error
		if list, err = parseServerJSON(trimmed); err != nil {
			return nil, fmt.Errorf("not a JSON server list: %v", err)
		}
	}
	for i, a := range list {
		err := config.ValidAddr(a)
		if host, port, e := net.SplitHostPort(a); err == nil && e == nil && (host == "" || port == "0") {
			err = errors.New("want host:port with a host and a port")
		}
		if err != nil {
			return nil, fmt.Errorf("servers[%d]: bad address %q: %v", i, a, err)
		}
	}
	return list, nil
}

func parseServerJSON(data []byte) ([]string, error) {
	want := `want {"servers": ["host:port", ...]} or ["host:port", ...]`
	if len(data) == 0 || (data[0] != '{' && data[0] != '[') {
		return nil, errors.New(want)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var list []string
	if data[0] == '[' {
		if err := dec.Decode(&list); err != nil {
			return nil, err
		}
	} else {
		var v struct {
			Servers *[]string `json:"servers"`
		}
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if v.Servers == nil {
			return nil, errors.New("no \"servers\" field (" + want + ")")
		}
		list = *v.Servers
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one value (" + want + ")")
	}
	if list == nil {
		list = []string{}
	}
	return list, nil
}
