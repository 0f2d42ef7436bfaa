//go:build unix

package deadletter

import (
	"errors"
	"os"
)

// syncDir fsyncs a directory, so that a file created or renamed in it
// survives power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
