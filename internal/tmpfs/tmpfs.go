// Package tmpfs mounts small tmpfs file systems for tests that need a disk
// to fill up: a real file system that answers ENOSPC, not a mock of one.
// Mounting needs Linux and root (CAP_SYS_ADMIN), as CI has. Elsewhere the
// test is skipped, unless ORDERLY_REQUIRE_TMPFS is set (.ci/run sets it):
// then it fails, so that a full-disk test cannot pass in CI by not
// running.
package tmpfs

import (
	"os"
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
