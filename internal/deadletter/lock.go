package deadletter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderly-go/orderly/internal/flock"
)

// lockDir locks <dir>/deadletters.lock (flock.Lock), so that one Store
// at a time writes the directory. The kernel drops the lock when its
// holder dies, so a crash never leaves it behind; a holder that is
// exiting (right after a kill -9) is waited for, up to flock.Wait, so
// that a consumer restarted at once gets the lock its dead predecessor
// held. The lock belongs to the open file, so a second Open in the same
// process is refused too.
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
