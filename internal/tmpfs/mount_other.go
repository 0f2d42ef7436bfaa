//go:build !linux

package tmpfs

import "errors"

func mount(string, int64) error { return errors.New("a size-limited tmpfs needs Linux") }

func unmount(string) error { return nil }

func available(string) (int64, error) { return 0, errors.New("statfs needs Linux") }
