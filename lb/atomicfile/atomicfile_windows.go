package atomicfile

import (
	"os"
	"path/filepath"
)

// writeFile is renameio's way (which does not build on Windows) with the calls Windows has: os.Rename
// is MoveFileEx with MOVEFILE_REPLACE_EXISTING, which replaces the target in one step on one volume
// (the temporary file is in the target's directory). Windows keeps no Unix mode: perm only decides
// whether the file is read-only.
func writeFile(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()      //nolint:errcheck // closed already, or failing anyway
			os.Remove(tmp) //nolint:errcheck // the error returned says what failed
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Chmod(tmp, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
