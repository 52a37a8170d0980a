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

// watchConfig calls reload after the config at path changes: a *.toml file of the directory (or the one
// file) written, created, removed or renamed. It returns when ctx ends. A watch that cannot be set up is
// reported through logf; SIGHUP still reloads then.
func watchConfig(ctx context.Context, path string, reload func(), logf func(string, ...any)) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		logf("config watch: %v (reload with SIGHUP)", err)
		return
	}
	defer w.Close()
	dir, only := path, ""
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		// One file: watch its directory, since editors replace a file by renaming another over it.
		dir, only = filepath.Dir(path), filepath.Base(path)
	}
	if err := w.Add(dir); err != nil {
		logf("config watch: %s: %v (reload with SIGHUP)", dir, err)
		return
	}
	relevant := func(name string) bool {
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
		}
	}
}
