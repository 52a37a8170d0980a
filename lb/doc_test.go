package lb

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The package comment names every file of the package and every package under lb/: a file or a
// package added, moved or renamed is said where a newcomer starts reading.
func TestThePackageCommentNamesEveryFileAndSubPackage(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "lb.go", nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	files, _ := filepath.Glob("*.go")
	for _, name := range files {
		if !strings.HasSuffix(name, "_test.go") && !strings.Contains(doc, name) {
			t.Errorf("lb's package comment does not name %s", name)
		}
	}
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() && e.Name() != "testdata" && !strings.Contains(doc, "lb/"+e.Name()) {
			t.Errorf("lb's package comment does not name lb/%s", e.Name())
		}
	}
}
