package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// debounce is how long the config must stay unchanged after a file event before it is reloaded: an
// editor's save (truncate, write, rename) or a deploy copying several files is one reload.
const debounce = 300 * time.Millisecond

// watchConfig calls catchUp once the watch is set up, then reload after the config at path changes: a *.toml file of the directory (or the one
// file) written, created, removed or renamed, or one of the files secrets returns (the running config's
// keys and password files, asked again at each value of applied: a reload applied). It returns when ctx
// ends. A watch that cannot be set up is reported through logf, with how to reload then (reloadHint:
// SIGHUP, or on Windows, which has none, a restart).
func watchConfig(ctx context.Context, path string, reload, catchUp func(), secrets func() []string, applied <-chan struct{}, logf func(string, ...any)) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		logf("config watch: %v (%s)", err, reloadHint)
		return
	}
	defer w.Close()
	dir, only := path, ""
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		// One file: watch its directory, since editors replace a file by renaming another over it.
		dir, only = filepath.Dir(path), filepath.Base(path)
	}
	if err := w.Add(dir); err != nil {
		logf("config watch: %s: %v (%s)", dir, err, reloadHint)
		return
	}
	dirs := map[string]bool{abs(dir): true}
	watched := map[string]bool{} // secret files, absolute
	// syncSecrets watches the directories of the running config's secret files.
	syncSecrets := func() {
		clear(watched)
		for _, f := range secrets() {
			f = abs(f)
			watched[f] = true
			if d := filepath.Dir(f); !dirs[d] {
				if err := w.Add(d); err != nil {
					logf("config watch: %s: %v (after changing %s, %s)", d, err, f, reloadHint)
					continue
				}
				dirs[d] = true
			}
		}
	}
	syncSecrets()
	// The config was read before the watch was set up: an edit made meanwhile (a deploy writing the
	// files as fairlead starts) is caught up now. An unchanged config is skipped, silently: nobody
	// asked for this reload.
	catchUp()
	relevant := func(name string) bool {
		if watched[abs(name)] {
			return true
		}
		if filepath.Dir(abs(name)) != abs(dir) {
			return false
		}
		base := filepath.Base(name)
		if only != "" {
			return base == only
		}
		return strings.HasSuffix(base, ".toml") && !strings.HasPrefix(base, ".")
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Events:
			if !ok {
				return
			}
			if relevant(e.Name) && e.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 {
				timer.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			logf("config watch: %v", err)
		case <-timer.C:
			reload()
		case <-applied:
			syncSecrets()
		}
	}
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
