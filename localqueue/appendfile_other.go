//go:build !linux

package localqueue

const canMap = false

func (a *appendFile) grow(int64) error {
	a.noMap = true
	return errNoMap
}

func (a *appendFile) unmap() error { return nil }

// sync is fsync(2).
func (a *appendFile) sync() error { return a.f.Sync() }
