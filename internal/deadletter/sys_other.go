//go:build !unix

package deadletter

// syncDir does nothing off unix: Windows cannot fsync a directory, and
// NTFS journals renames itself.
func syncDir(string) error { return nil }
