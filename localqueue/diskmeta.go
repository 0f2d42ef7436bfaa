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

// diskMeta is go-diskqueue's metadata: its depth and its read and write
// positions (data file number, byte offset), as it writes them to
// <name>.diskqueue.meta.dat, one number (or pair) a line.
type diskMeta struct {
	depth, readNum, readPos, writeNum, writePos int64
}

// prepareMetadata fixes go-diskqueue's metadata file before go-diskqueue
// reads it, for gaps in go-diskqueue v1.1.0's recovery. go-diskqueue
// writes its metadata only when it syncs: every SyncEvery operations,
// every SyncTimeout, on a new file, on Close. minRecord is the smallest
// record go-diskqueue accepts, its 4-byte length included.
//
//   - Missing metadata (a new queue, or one just emptied, which deletes
//     it, killed before its first sync): go-diskqueue would start at file
//     0, position 0, as if empty, and overwrite what is there, losing every
//     message Put since although each write(2) reached the kernel.
//   - Stale metadata (killed between syncs: the write file is longer than
//     the recorded write position, or later data files exist, or the
//     reader had moved on and removed the read file): go-diskqueue starts
//     writing at the next file number and reads the old files to their
//     end, but it does not record that skip until it syncs; killed again
//     before then, the next recovery skips to the same number and
//     overwrites what the second run wrote there. It also keeps the stale
//     depth, so Depth is wrong until the queue drains (and a missing read
//     file is an error it logs).
//   - Damaged metadata (it does not parse, or its numbers do not fit the
//     data files: negative, read after write, a position past the end of
//     its file, a data file missing between the two, a data file before
//     the read file, a depth the bytes between the positions cannot
//     hold): go-diskqueue would keep what it parsed and zeros for the rest,
//     so it starts writing at file 0, position 0 (overwriting it), skips
//     files, or reads garbage and renames the file to .bad. damaged
//     reports this case; it is logged at error level with the path.
//
// In all three cases prepareMetadata writes metadata that reads through
// the last data file, writes to a new file after it, and has the depth
// recounted from the records' length prefixes, so no data file is ever
// written over. Reading starts at the recorded read position when it can
// be trusted: always for stale metadata; for damaged metadata only when
// it parsed, is in the first data file and falls on a record boundary.
// Otherwise it starts at the first data file, and records already read
// from it come back (at-least-once; the journal drops those it knows).
// Metadata that fits the data files is left alone.
func prepareMetadata(dir, name string, minRecord int64, log *zap.Logger) (damaged bool, err error) {
	meta := filepath.Join(dir, name+".diskqueue.meta.dat")
	fs, err := listDataFiles(dir, name)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(meta)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if len(fs.nums) == 0 {
			return false, writeMetadata(meta, diskMeta{})
		}
		log.Warn("go-diskqueue metadata missing although data files exist (a crash before its first sync); recovering them",
			zap.String("file", meta), zap.Int64("first_file", fs.nums[0]), zap.Int64("last_file", fs.last()))
		return false, fs.rebuild(meta, fs.nums[0], 0)
	case err != nil:
		return false, fmt.Errorf("read %s: %w", meta, err)
	}

	m, parsed, perr := parseMetadata(b)
	if perr == nil {
		if perr = fs.misfit(m, minRecord); perr == nil {
			if !fs.stale(m) {
				return false, nil
			}
			readNum, readPos := m.readNum, m.readPos
			if _, ok := fs.sizes[readNum]; !ok {
				// The reader had moved on and removed the file: start at
				// the next one (misfit made sure it is the first).
				readNum, readPos = fs.nums[0], 0
			}
			log.Warn("go-diskqueue metadata behind its data files after a crash; recovering them",
				zap.String("file", meta), zap.Int64("depth_was", m.depth), zap.Int64("read_file", readNum), zap.Int64("last_file", fs.last()))
			return false, fs.rebuild(meta, readNum, readPos)
		}
	}

	// Damaged: keep the read position only if it parsed and fits.
	readNum, readPos, kept := int64(0), int64(0), false
	if len(fs.nums) > 0 {
		readNum = fs.nums[0]
		if parsed >= 3 && m.readNum == readNum && m.readPos >= 0 && m.readPos <= fs.sizes[readNum] {
			kept, err = fs.boundary(readNum, m.readPos)
			if err != nil {
				return true, err
			}
			if kept {
				readPos = m.readPos
			}
		}
	}
	const maxShown = 200
	log.Error("go-diskqueue metadata is damaged; rebuilding it from the data files",
		zap.String("file", meta), zap.Error(perr), zap.ByteString("content", b[:min(len(b), maxShown)]),
		zap.Int("data_files", len(fs.nums)), zap.Bool("read_position_kept", kept))
	if !kept && len(fs.nums) > 0 {
		log.Warn("go-diskqueue's read position is lost with its metadata: records already read from the first data file may be delivered again",
			zap.String("file", fs.path(readNum)))
	}
	if len(fs.nums) == 0 {
		return true, writeMetadata(meta, diskMeta{})
	}
	return true, fs.rebuild(meta, readNum, readPos)
}

// ownWriteFile makes go-diskqueue write what this run writes to a data
// file of its own, after prepareMetadata made the metadata fit the data
// files. go-diskqueue appends to the file it last wrote to, and when its
// reader meets damage in the file it is writing to, it renames that file
// to .bad and moves on, with every record written there since: the
// records of this run would go with the damage of an earlier one. So
// unless the write file is empty, the metadata moves the write position to
// the start of the next file number; the reader reads the old write file
// to its end as a whole file (go-diskqueue removes it when it moves on,
// and a file read whole before Open is removed as diskroll.go describes).
//
// One write file is reused as it is: one that holds nothing but a dedup
// marker (an earlier Open's, followed by nothing). ownWriteFile returns
// that marker's nonce, for Open to take it as its own rather than write
// another, so that a queue restarted again and again with nothing written
// in between does not grow by a marker each time; 0 if there is none.
func ownWriteFile(dir, name string) (markerNonce uint64, err error) {
	meta := filepath.Join(dir, name+".diskqueue.meta.dat")
	b, err := os.ReadFile(meta)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", meta, err)
	}
	m, _, err := parseMetadata(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", meta, err)
	}
	if m.writePos == 0 {
		return 0, nil
	}
	fs := &dataFileSet{dir: dir, name: name}
	if m.writePos == 4+markerSize {
		rec, err := os.ReadFile(fs.path(m.writeNum))
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", fs.path(m.writeNum), err)
		}
		if len(rec) == 4+markerSize && binary.BigEndian.Uint32(rec) == markerSize {
			if nonce, ok := decodeMarker(rec[4:]); ok {
				return nonce, nil
			}
		}
	}
	m.writeNum, m.writePos = m.writeNum+1, 0
	return 0, writeMetadata(meta, m)
}

// parseMetadata parses go-diskqueue's metadata as go-diskqueue does
// (fmt's "%d\n%d,%d\n%d,%d\n"). parsed is how many of the five numbers it
// read, in file order, before an error.
func parseMetadata(b []byte) (m diskMeta, parsed int, err error) {
	parsed, err = fmt.Sscanf(string(b), "%d\n%d,%d\n%d,%d\n", &m.depth, &m.readNum, &m.readPos, &m.writeNum, &m.writePos)
	if err != nil {
		return m, parsed, fmt.Errorf("does not parse after %d of 5 numbers: %w", parsed, err)
	}
	return m, parsed, nil
}

// dataFileSet is what go-diskqueue's data files of one queue look like on
// disk.
type dataFileSet struct {
	dir, name string
	nums      []int64         // file numbers, ascending
	sizes     map[int64]int64 // by file number
}

func listDataFiles(dir, name string) (*dataFileSet, error) {
	nums, err := dataFiles(dir, name)
	if err != nil {
		return nil, err
	}
	fs := &dataFileSet{dir: dir, name: name, nums: nums, sizes: make(map[int64]int64, len(nums))}
	for _, n := range nums {
		info, err := os.Stat(fs.path(n))
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", fs.path(n), err)
		}
		fs.sizes[n] = info.Size()
	}
	return fs, nil
}

func (fs *dataFileSet) path(n int64) string {
	return filepath.Join(fs.dir, fmt.Sprintf("%s.diskqueue.%06d.dat", fs.name, n))
}

// last is the highest data file number; only with data files.
func (fs *dataFileSet) last() int64 { return fs.nums[len(fs.nums)-1] }

// misfit reports why m cannot describe these data files, or nil. Stale
// metadata fits: the write file may have grown past the write position,
// data files may follow the write file, and the read file may be gone
// (the reader moved on) if the next file is the first one left. A depth
// that records lost to a damaged data file inflate (go-diskqueue does not
// subtract them) can exceed what the remaining bytes hold: that is
// reported too, and the rebuild recounts it.
func (fs *dataFileSet) misfit(m diskMeta, minRecord int64) error {
	switch {
	case m.depth < 0 || m.readNum < 0 || m.readPos < 0 || m.writeNum < 0 || m.writePos < 0:
		return errors.New("negative numbers")
	case m.readNum > m.writeNum || (m.readNum == m.writeNum && m.readPos > m.writePos):
		return fmt.Errorf("read position %d,%d after write position %d,%d", m.readNum, m.readPos, m.writeNum, m.writePos)
	}
	if len(fs.nums) > 0 && fs.nums[0] < m.readNum {
		return fmt.Errorf("data file %d comes before read file %d", fs.nums[0], m.readNum)
	}
	if size, ok := fs.sizes[m.readNum]; ok && m.readPos > size {
		return fmt.Errorf("read position %d past the end of %s (%d bytes)", m.readPos, fs.path(m.readNum), size)
	}
	if size, ok := fs.sizes[m.writeNum]; m.writePos > 0 && (!ok || m.writePos > size) {
		return fmt.Errorf("write position %d past the end of %s (%d bytes)", m.writePos, fs.path(m.writeNum), size)
	}
	// Every file strictly between the read and the write file must be
	// there, and the read file too unless the reader had moved on from it.
	between, bytes := int64(0), int64(0)
	for _, n := range fs.nums {
		if n < m.readNum || n > m.writeNum {
			continue
		}
		if n != m.readNum && n != m.writeNum {
			between++
		}
		from, to := int64(0), fs.sizes[n]
		if n == m.readNum {
			from = m.readPos
		}
		if n == m.writeNum {
			to = m.writePos
		}
		bytes += max(to-from, 0)
	}
	if want := max(m.writeNum-m.readNum-1, 0); between != want {
		return fmt.Errorf("%d of the %d data files between read file %d and write file %d are missing", want-between, want, m.readNum, m.writeNum)
	}
	_, haveRead := fs.sizes[m.readNum]
	if !haveRead && len(fs.nums) > 0 && fs.nums[0] != m.readNum+1 {
		return fmt.Errorf("read file %d is missing and the first data file is %d, not the next one", m.readNum, fs.nums[0])
	}
	// Once the reader has moved on from the read file, the records it took
	// from there since the last sync are in the depth but no longer on
	// disk: only the recount of the stale case can tell then.
	if (haveRead || m.readNum == m.writeNum) && (m.depth > bytes/minRecord || (m.depth == 0) != (bytes == 0)) {
		return fmt.Errorf("depth %d does not fit the %d bytes between the read and the write position", m.depth, bytes)
	}
	return nil
}

// stale reports whether the data files have moved past m's write position
// (see prepareMetadata), or past its read file, which the reader removed
// when it moved on (go-diskqueue would fail to open it, and keep a depth
// that counts the records it had read there).
func (fs *dataFileSet) stale(m diskMeta) bool {
	if len(fs.nums) == 0 {
		return false
	}
	_, haveRead := fs.sizes[m.readNum]
	return fs.sizes[m.writeNum] > m.writePos || fs.last() > m.writeNum || !haveRead
}

// boundary reports whether a record of data file n starts (or the file
// ends) at pos.
func (fs *dataFileSet) boundary(n, pos int64) (bool, error) {
	_, end, err := countRecords(fs.path(n), 0, pos)
	return end == pos, err
}

// rebuild writes metadata that reads from readNum, readPos through the
// last data file, writes to a new file after it, and counts the records
// in between.
func (fs *dataFileSet) rebuild(meta string, readNum, readPos int64) error {
	last := fs.last()
	count := int64(0)
	for _, n := range fs.nums {
		if n < readNum {
			continue
		}
		from := int64(0)
		if n == readNum {
			from = readPos
		}
		c, _, err := countRecords(fs.path(n), from, -1)
		if err != nil {
			return err
		}
		count += c
	}
	return writeMetadata(meta, diskMeta{depth: count, readNum: readNum, readPos: readPos, writeNum: last + 1})
}

// writeMetadata replaces go-diskqueue's metadata file atomically.
func writeMetadata(meta string, m diskMeta) error {
	tmp := meta + ".prepare.tmp"
	content := fmt.Sprintf("%d\n%d,%d\n%d,%d\n", m.depth, m.readNum, m.readPos, m.writeNum, m.writePos)
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
// that start at or after offset from and end at or before offset to (-1:
// the end of the file). end is where the last one counted ends (from if
// none). A missing file counts none.
func countRecords(path string, from, to int64) (n, end int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, from, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("stat %s: %w", path, err)
	}
	if to < 0 || to > info.Size() {
		to = info.Size()
	}
	var hdr [4]byte
	for end = from; ; n++ {
		if _, err := f.ReadAt(hdr[:], end); err != nil {
			if errors.Is(err, io.EOF) {
				return n, end, nil
			}
			return 0, 0, fmt.Errorf("read %s: %w", path, err)
		}
		next := end + 4 + int64(binary.BigEndian.Uint32(hdr[:]))
		if next > to {
			return n, end, nil
		}
		end = next
	}
}
