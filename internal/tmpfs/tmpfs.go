// Package tmpfs mounts small tmpfs file systems for tests that need a disk
// to fill up: a real file system that answers ENOSPC, not a mock of one.
// Mounting needs Linux and root (CAP_SYS_ADMIN), as CI has. Elsewhere the
// test is skipped, unless ORDERLY_REQUIRE_TMPFS is set (.ci/run sets it):
// then it fails, so that a full-disk test cannot pass in CI by not
// running.
package tmpfs

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// RequireEnv names the environment variable that makes Mount fail rather
// than skip the test where it cannot mount.
const RequireEnv = "ORDERLY_REQUIRE_TMPFS"

// Mount mounts a tmpfs of size bytes on a new temporary directory, returns
// the directory and unmounts it when the test ends.
func Mount(tb testing.TB, size int64) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := mount(dir, size); err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("a full-disk test needs a tmpfs (%s is set): %v", RequireEnv, err)
		}
		tb.Skipf("a full-disk test needs a tmpfs: %v", err)
	}
	tb.Cleanup(func() {
		if err := unmount(dir); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return dir
}

// Fill writes a file into dir until at most free bytes are left on its
// file system (0: until a write fails with ENOSPC), and returns the
// file's path. The file is removed when the test ends, before cleanups
// registered earlier run (a queue's Close, which needs room to write its
// metadata).
func Fill(tb testing.TB, dir string, free int64) string {
	tb.Helper()
	f, err := os.CreateTemp(dir, "ballast")
	if err != nil {
		tb.Fatalf("create a ballast file: %v", err)
	}
	tb.Cleanup(func() { os.Remove(f.Name()) })
	defer f.Close()
	if free > 0 {
		avail, err := available(dir)
		if err != nil {
			tb.Fatalf("%v", err)
		}
		if avail < free {
			tb.Fatalf("%s has %d bytes free, want more than %d", dir, avail, free)
		}
		if _, err := f.Write(make([]byte, avail-free)); err != nil {
			tb.Fatalf("fill %s to %d bytes free: %v", dir, free, err)
		}
		return f.Name()
	}
	block := make([]byte, 4<<10)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				tb.Fatalf("fill %s: %v", dir, err)
			}
			return f.Name()
		}
	}
}
