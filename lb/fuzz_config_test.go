package lb

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/fairlead/fairlead/lb/config"
)

// FuzzNewBuildsFromEveryConfigThatLoads writes arbitrary bytes as a conf.d file into a directory, alone
// and after copies of the shipped conf.d files (so that it overrides keys of a valid config, as an
// operator's drop-in file does), and builds pools and routes (New, then Close) from every config Load
// accepts: New must never panic. What Load answers (a config of exactly those files, or problems
// each naming its file and key, never showing a credential, in a stable order) is lb/config's
// FuzzLoadConfig.
//
// The seed corpus is every file of conf.d/ and minimalConfig; inputs that failed are kept under
// testdata/fuzz/FuzzNewBuildsFromEveryConfigThatLoads/ and run with the other tests.
func FuzzNewBuildsFromEveryConfigThatLoads(f *testing.F) {
	shipped, _ := filepath.Glob(filepath.Join("..", "conf.d", "*.toml"))
	alone, over := f.TempDir(), f.TempDir()
	for _, file := range shipped {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		// The shipped files name their demo files relative to the repository's root (`make run` runs
		// fairlead there); the copies name them from here, the package's directory.
		b = bytes.ReplaceAll(b, []byte(`"conf.d/`), []byte(`"../conf.d/`))
		mustWriteFile(f, filepath.Join(over, filepath.Base(file)), string(b))
	}
	f.Add([]byte(minimalConfig))
	f.Add([]byte(""))

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dir := range []string{alone, over} {
			mustWriteFile(t, filepath.Join(dir, "99-fuzz.toml"), string(data))
			if cfg, err := config.Load(dir); err == nil {
				New(cfg, Options{Logf: func(string, ...any) {}}).Close()
			}
		}
	})
}
