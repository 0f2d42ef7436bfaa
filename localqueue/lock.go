package localqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderly-go/orderly/internal/flock"
)

// lockFile locks <dir>/<name>.lock so that two Queues never run
// go-diskqueue on the same files, in this process or another (flock.Lock
// says what a crash and a kill -9 leave behind). A refusal wraps
// ErrLocked and names the lock file and the holder.
func lockFile(dir, name string) (*os.File, error) {
	f, err := flock.Lock(filepath.Join(dir, name+".lock"), 0o600)
	if errors.Is(err, flock.ErrHeld) {
		return nil, fmt.Errorf("%w: %w", ErrLocked, err)
	}
	if err != nil {
		return nil, fmt.Errorf("localqueue: %w", err)
	}
	return f, nil
}
