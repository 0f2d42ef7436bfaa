package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderly-go/orderly/internal/flock"
)

// lockData locks <dir>/broker.lock, so that two brokers never write the
// same partition logs (each would append from the offsets it loaded, and
// a restart would find offsets twice over). flock.Lock says what a crash
// and a kill -9 leave behind.
func lockData(dir string) (*os.File, error) {
	f, err := flock.Lock(filepath.Join(dir, LockFile), 0o644)
	if errors.Is(err, flock.ErrHeld) {
		err = fmt.Errorf("in use (another orderly broker?): %w", err)
	}
	if err != nil {
		return nil, &DataDirError{Dir: dir, Err: err}
	}
	return f, nil
}
