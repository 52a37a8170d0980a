// Command fairlead-crosscheck type-checks packages, their tests and everything they import (the
// standard library included) for other platforms, from source: what `GOOS=... GOARCH=... go vet` would
// find wrong in them there (an identifier, a field or a system call that the platform lacks, a file
// whose build constraints leave a name undefined) without compiling anything, so in seconds where a
// cold cross build takes a minute per platform. make test runs it for every platform of README's
// "Where fairlead runs"; make cross-build builds and vets for real.
//
//	go run ./bench/cmd/fairlead-crosscheck -platforms windows/amd64,darwin/arm64 ./cmd/fairlead/... ./lb/...
//
// The packages are those `go list -deps -test` gives for the platform (cgo off, as in a cross build).
// It exits 1 after listing every error, naming the platform, 2 if it could not run.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	platforms := flag.String("platforms", "", "comma-separated GOOS/GOARCH pairs")
	flag.Parse()
	if *platforms == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: fairlead-crosscheck -platforms GOOS/GOARCH,... PACKAGES...")
		os.Exit(2)
	}
	// The platforms are checked at once, each on a goroutine (a check shares nothing), and reported in order.
	type result struct {
		n    int
		errs []string
		err  error
		took time.Duration
	}
	list := strings.Split(*platforms, ",")
	results := make([]chan result, len(list))
	for i, p := range list {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			fmt.Fprintf(os.Stderr, "fairlead-crosscheck: %q is not GOOS/GOARCH\n", p)
			os.Exit(2)
		}
		results[i] = make(chan result, 1)
		go func() {
			start := time.Now()
			n, errs, err := Check(goos, goarch, flag.Args())
			results[i] <- result{n, errs, err, time.Since(start)}
		}()
	}
	failed := false
	for i, p := range list {
		r := <-results[i]
		if r.err != nil {
			fmt.Fprintf(os.Stderr, "fairlead-crosscheck: %s: %v\n", p, r.err)
			os.Exit(2)
		}
		for _, e := range r.errs {
			fmt.Fprintf(os.Stderr, "%s: %s\n", p, e)
		}
		if len(r.errs) > 0 {
			failed = true
			fmt.Printf("%s: %d errors in %d packages\n", p, len(r.errs), r.n)
			continue
		}
		fmt.Printf("%s: %d packages type-check (%.1fs)\n", p, r.n, r.took.Seconds())
	}
	if failed {
		os.Exit(1)
	}
}

// listed is what go list tells of a package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	ImportMap  map[string]string
	Module     *struct{ GoVersion string }
	Error      *struct{ Err string }
	DepsErrors []struct{ Err string }
}

// Check type-checks patterns, their tests and their dependencies for goos/goarch. It returns how many
// packages it checked and their errors (go list's too); err is a failure to run go list.
func Check(goos, goarch string, patterns []string) (n int, errs []string, err error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-deps", "-test", "-json"}, patterns...)...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, nil, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	fset := token.NewFileSet()
	checked := map[string]*types.Package{"unsafe": types.Unsafe}
	seen := map[string]bool{} // a package and its test variant report the same errors: once
	report := func(e string) {
		if !seen[e] && len(errs) < 200 {
			seen[e] = true
			errs = append(errs, e)
		}
	}
	sizes := types.SizesFor("gc", goarch)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return n, errs, fmt.Errorf("go list's output: %v", err)
		}
		if p.Error != nil {
			report(p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			report(e.Err)
		}
		// go list -deps lists a package after what it imports. The unsafe package is the checker's;
		// the generated test mains (a name ending in .test) only call the tests.
		if p.ImportPath == "unsafe" || strings.HasSuffix(p.ImportPath, ".test") || len(p.GoFiles) == 0 {
			continue
		}
		files := make([]*ast.File, 0, len(p.GoFiles))
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				report(err.Error())
				continue
			}
			files = append(files, f)
		}
		conf := types.Config{
			Importer: importer{checked, p.ImportMap},
			Sizes:    sizes,
			Error:    func(err error) { report(err.Error()) },
		}
		if p.Module != nil && p.Module.GoVersion != "" {
			conf.GoVersion = "go" + p.Module.GoVersion
		}
		path, _, _ := strings.Cut(p.ImportPath, " ") // "a/b [a/b.test]": a/b with its tests
		pkg, _ := conf.Check(path, fset, files, nil)
		checked[p.ImportPath] = pkg
		n++
	}
	return n, errs, nil
}

// importer finds an import among the packages checked already, through the importing package's
// ImportMap (which names the test variants: "a/b [a/b.test]").
type importer struct {
	checked map[string]*types.Package
	mapped  map[string]string
}

func (im importer) Import(path string) (*types.Package, error) {
	if id, ok := im.mapped[path]; ok {
		path = id
	}
	if pkg := im.checked[path]; pkg != nil {
		return pkg, nil
	}
	return nil, fmt.Errorf("%s: not listed before its importer", path)
}
