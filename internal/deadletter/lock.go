package deadletter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderly-go/orderly/internal/flock"
)

// lockDir locks <dir>/deadletters.lock, so that one Store at a time
// writes the directory. flock.Lock says what a crash and a kill -9 leave
// behind.
func lockDir(dir string) (*os.File, error) {
	f, err := flock.Lock(filepath.Join(dir, LockFile), 0o644)
	if errors.Is(err, flock.ErrHeld) {
		return nil, fmt.Errorf("deadletter: %s is in use (a running consumer?): %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	return f, nil
}
