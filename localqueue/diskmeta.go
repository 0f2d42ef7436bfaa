package localqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// prepareMetadata fixes go-diskqueue's metadata file before go-diskqueue
// reads it, for gaps in go-diskqueue v1.1.0's crash recovery. go-diskqueue
// writes its metadata (depth, read and write positions) only when it syncs:
// every SyncEvery operations, every SyncTimeout, on a new file, on Close.
//
//   - Missing metadata (a new queue, or one just emptied, which deletes
//     it, killed before its first sync): go-diskqueue would start at file
//     0, position 0, as if empty, and overwrite what is there, losing every
//     message Put since although each write(2) reached the kernel.
//   - Stale metadata (killed between syncs: the write file is longer than
//     the recorded write position, or later data files exist):
//     go-diskqueue starts writing at the next file number and reads the
//     old files to their end, but it does not record that skip until it
//     syncs; killed again before then, the next recovery skips to the same
//     number and overwrites what the second run wrote there. It also keeps
//     the stale depth, so Depth is wrong until the queue drains.
//
// In both cases prepareMetadata writes metadata that reads from the
// recorded read position (or the first data file) through the last data
// file, writes to a new file after it, and has the depth recounted from
// the records' length prefixes. A clean metadata file is left alone.
func prepareMetadata(dir, name string, log *zap.Logger) error {
	meta := filepath.Join(dir, name+".diskqueue.meta.dat")
	file := func(n int64) string { return filepath.Join(dir, fmt.Sprintf("%s.diskqueue.%06d.dat", name, n)) }
	nums, err := dataFiles(dir, name)
	if err != nil {
		return err
	}
	var depth, readNum, readPos, writeNum, writePos int64
	b, err := os.ReadFile(meta)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if len(nums) == 0 {
			return writeMetadata(meta, 0, 0, 0, 0, 0)
		}
		readNum = nums[0]
	case err != nil:
		return fmt.Errorf("read %s: %w", meta, err)
	default:
		if _, err := fmt.Sscanf(string(b), "%d\n%d,%d\n%d,%d\n", &depth, &readNum, &readPos, &writeNum, &writePos); err != nil {
			return nil // go-diskqueue reports it
		}
		info, err := os.Stat(file(writeNum))
		grown := err == nil && info.Size() > writePos
		if !grown && (len(nums) == 0 || nums[len(nums)-1] <= writeNum) {
			return nil
		}
	}
	last := nums[len(nums)-1]
	if _, err := os.Stat(file(readNum)); err != nil {
		// The reader had moved on and removed the file: start at the next.
		for _, n := range nums {
			if n > readNum {
				readNum, readPos = n, 0
				break
			}
		}
	}
	count := int64(0)
	for n := readNum; n <= last; n++ {
		from := int64(0)
		if n == readNum {
			from = readPos
		}
		c, err := countRecords(file(n), from)
		if err != nil {
			return err
		}
		count += c
	}
	log.Warn("go-diskqueue metadata behind its data files after a crash; recovering them",
		zap.String("file", meta), zap.Int64("depth_was", depth), zap.Int64("depth", count),
		zap.Int64("read_file", readNum), zap.Int64("last_file", last))
	return writeMetadata(meta, count, readNum, readPos, last+1, 0)
}

// writeMetadata replaces go-diskqueue's metadata file atomically.
func writeMetadata(meta string, depth, readNum, readPos, writeNum, writePos int64) error {
	tmp := meta + ".prepare.tmp"
	content := fmt.Sprintf("%d\n%d,%d\n%d,%d\n", depth, readNum, readPos, writeNum, writePos)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, meta); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return syncDir(filepath.Dir(meta))
}

// dataFiles lists the numbers of name's data files in dir, ascending.
func dataFiles(dir, name string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	prefix := name + ".diskqueue."
	var nums []int64
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		if s, ok = strings.CutSuffix(s, ".dat"); !ok {
			continue
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			nums = append(nums, n) // ReadDir sorts by name; names are zero-padded
		}
	}
	return nums, nil
}

// countRecords counts the whole length-prefixed records of a data file
// from offset from on. A missing file counts none.
func countRecords(path string, from int64) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	var n int64
	var hdr [4]byte
	for off := from; ; n++ {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return 0, fmt.Errorf("read %s: %w", path, err)
		}
		if off += 4 + int64(binary.BigEndian.Uint32(hdr[:])); off > info.Size() {
			return n, nil
		}
	}
}
