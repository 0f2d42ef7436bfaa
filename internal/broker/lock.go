package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderly-go/orderly/internal/flock"
)

// lockData locks <dir>/broker.lock (flock.Lock), so that two brokers
// never write the same partition logs (each would append from the
// offsets it loaded, and a restart would find offsets twice over). The
// kernel drops the lock when its holder dies, so a crash never leaves it
// behind; a holder that is exiting (right after a kill -9) is waited
// for, up to flock.Wait, so that a broker restarted at once gets the lock
// its dead predecessor held. The lock belongs to the open file, so a
// second broker in the same process is refused too.
func lockData(dir string) (*os.File, error) {
	f, err := flock.Lock(filepath.Join(dir, LockFile), 0o644)
	if errors.Is(err, flock.ErrHeld) {
		return nil, &DataDirError{Dir: dir, Err: fmt.Errorf("in use (another orderly broker?): %w", err)}
	}
	if err != nil {
		return nil, &DataDirError{Dir: dir, Err: err}
	}
	return f, nil
}
