package deadletter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Damage is a stretch of a store's file that holds no readable record: a
// scan skipped it and went on at the next good record.
type Damage struct {
	Path   string
	Offset int64 // where the damaged bytes start
	Length int64 // how many were skipped
	Reason string
}

func (d Damage) Error() string {
	return fmt.Sprintf("deadletter: %s: %d damaged bytes at offset %d skipped: %s", d.Path, d.Length, d.Offset, d.Reason)
}

// windowSize is how much a scan reads at a time.
const windowSize = 1 << 20

// fileScanner reads the frames of a store file of size bytes through a
// window buffer.
type fileScanner struct {
	r      io.ReaderAt
	path   string
	size   int64
	buf    []byte // the window: the file's bytes at bufOff
	bufOff int64
	err    error         // the first read error
	mended []mendedFrame // scanResult.mended
}

// scanResult is what a scan found besides the records.
type scanResult struct {
	records int64
	damaged int64 // stretches
	// tail is where an incomplete last frame starts (an Append still
	// being written, or one cut short by a crash), -1 if none.
	tail int64
	// mended are the frames whose length field was damaged (running past
	// the end of the file, or over the limit) and that were read with
	// the length their checksum holds.
	mended []mendedFrame
}

// mendedFrame is a frame at pos whose body is length bytes, not what its
// length field says.
type mendedFrame struct{ pos, length int64 }

// scan calls yield for every good frame, in file order, with its offset,
// its bytes (valid only during the call) and its record (which the caller
// may keep), and damage for every stretch that holds none. It stops at
// the first error of yield or of reading, and returns it.
func (s *fileScanner) scan(yield func(pos int64, raw []byte, r Record) error, damage func(Damage)) (scanResult, error) {
	res := scanResult{tail: -1}
	report := func(off, end int64, reason string) {
		res.damaged++
		if damage != nil {
			damage(Damage{Path: s.path, Offset: off, Length: end - off, Reason: reason})
		}
	}
	hdr := s.read(0, int(min(s.size, fileHeaderSize)))
	if s.err != nil {
		return res, s.err
	}
	pos := int64(fileHeaderSize)
	switch ok, err := checkFileHeader(hdr); {
	case err != nil:
		return res, fmt.Errorf("deadletter: %s: %w", s.path, err)
	case len(hdr) < fileHeaderSize:
		if s.size > 0 {
			report(0, s.size, "file header cut short")
		}
		return res, nil
	case !ok:
		if pos = s.resync(0); pos > 0 {
			report(0, pos, "bad file header")
		}
	}
	for pos < s.size && s.err == nil {
		raw, r, reason, partial := s.frameAt(pos, true)
		if s.err != nil {
			break
		}
		if reason == "" {
			res.records++
			if err := yield(pos, raw, r); err != nil {
				return res, err
			}
			pos += int64(len(raw))
			continue
		}
		next := s.resync(pos + 1)
		if next >= s.size && partial {
			res.tail = pos
			break
		}
		report(pos, next, reason)
		pos = next
	}
	res.mended = s.mended
	return res, s.err
}

// frameAt checks the frame at pos. For a good one it returns its bytes
// (valid until the next read) and its record; otherwise why not, and
// whether what is there is the start of a frame that runs past the end of
// the file (partial: a write not complete yet, or cut short). With mend, a
// frame whose length field alone is damaged is read by its checksum
// (bodyEnd); the scan asks that of the frames it reaches, not of every
// marker resync tries, which may be in a value full of them.
func (s *fileScanner) frameAt(pos int64, mend bool) (raw []byte, r Record, reason string, partial bool) {
	h := s.read(pos, int(min(s.size-pos, frameHeaderSize)))
	switch {
	case s.err != nil:
		return nil, Record{}, "read error", false
	case !bytes.HasPrefix(frameMarker[:], h[:min(len(h), len(frameMarker))]):
		return nil, Record{}, "no record marker", false
	case len(h) < frameHeaderSize:
		return nil, Record{}, "record cut short", true
	}
	n := int64(binary.BigEndian.Uint32(h[4:]))
	crc := binary.BigEndian.Uint32(h[8:])
	switch {
	case n > MaxRecordBytes || frameHeaderSize+n > s.size-pos:
		if body, ok := s.bodyEnd(pos, crc, mend); ok {
			// Not a write cut short (whose bytes are a prefix of
			// its body): a whole record whose length field was
			// damaged. The checksum covers the length field too, so
			// it says the right length: read the record with it.
			return s.mend(pos, h, body)
		}
		if n > MaxRecordBytes {
			return nil, Record{}, fmt.Sprintf("record length %d over the limit", n), false
		}
		return nil, Record{}, fmt.Sprintf("record of %d bytes runs past the end of the file", n), true
	}
	raw = s.read(pos, int(frameHeaderSize+n))
	switch {
	case s.err != nil:
		return nil, Record{}, "read error", false
	case int64(len(raw)) < frameHeaderSize+n: // the file shrank under us
		return nil, Record{}, "record cut short", true
	case frameCRC(raw[4:8], raw[frameHeaderSize:]) != crc:
		return nil, Record{}, "checksum mismatch", false
	}
	r, err := decodeBody(bytes.Clone(raw[frameHeaderSize:]))
	if err != nil {
		return nil, Record{}, err.Error(), false
	}
	return raw, r, "", false
}

// mend returns the frame at pos, header h, as its body says it is: its
// length field set to len(body), which its checksum holds, in bytes of its
// own (body is part of bodyEnd's window, which a record must not keep);
// and notes it in s.mended.
func (s *fileScanner) mend(pos int64, h, body []byte) (raw []byte, r Record, reason string, partial bool) {
	raw = make([]byte, frameHeaderSize+len(body))
	copy(raw, h[:frameHeaderSize])
	binary.BigEndian.PutUint32(raw[4:8], uint32(len(body)))
	copy(raw[frameHeaderSize:], body)
	r, err := decodeBody(raw[frameHeaderSize:])
	if err != nil {
		return nil, Record{}, err.Error(), false
	}
	s.mended = append(s.mended, mendedFrame{pos, int64(len(body))})
	return raw, r, "", false
}

// bodyEnd returns, with mend, the body of the frame at pos, whose length
// field runs past the end of the file or over the limit, if its checksum
// (crc, which covers the length field) says the field is what is damaged:
// the bytes up to the end of the file (or up to the first bytes of a
// marker there: an Append a crash cut short in it), or up to one of the
// next few frame markers (the next frame, or such an Append), check out as
// its body.
func (s *fileScanner) bodyEnd(pos int64, crc uint32, mend bool) (body []byte, ok bool) {
	const candidates = 8 // markers tried: a body rarely holds one
	rest := s.size - pos - frameHeaderSize
	if !mend || rest < 0 {
		return nil, false
	}
	body = make([]byte, min(rest, MaxRecordBytes)) // no body is longer
	if got, err := s.r.ReadAt(body, pos+frameHeaderSize); got < len(body) {
		if err != nil && !errors.Is(err, io.EOF) {
			s.err = fmt.Errorf("deadletter: read %s at offset %d: %w", s.path, pos+frameHeaderSize, err)
		}
		return nil, false
	}
	checks := func(m int) bool {
		var length [4]byte
		binary.BigEndian.PutUint32(length[:], uint32(m))
		return frameCRC(length[:], body[:m]) == crc
	}
	if rest == int64(len(body)) {
		// The body runs to the end of the file, or up to an Append cut
		// short inside its marker.
		for k := range len(frameMarker) {
			if k <= len(body) && bytes.Equal(body[len(body)-k:], frameMarker[:k]) && checks(len(body)-k) {
				return body[:len(body)-k], true
			}
		}
	}
	for i, k := 0, 0; i < len(body) && k < candidates; k++ {
		j := bytes.Index(body[i:], frameMarker[:])
		if j < 0 {
			break
		}
		if checks(i + j) {
			return body[:i+j], true
		}
		i += j + 1
	}
	return nil, false
}

// resync returns the offset of the first good frame at or after from, or
// the end of the file if there is none.
func (s *fileScanner) resync(from int64) int64 {
	for off := from; s.size-off >= frameHeaderSize && s.err == nil; {
		chunk := s.read(off, int(min(s.size-off, 64<<10)))
		i := bytes.Index(chunk, frameMarker[:])
		if i < 0 {
			if len(chunk) < len(frameMarker) {
				break
			}
			off += int64(len(chunk) - (len(frameMarker) - 1)) // a marker may straddle chunks
			continue
		}
		c := off + int64(i)
		if _, _, reason, _ := s.frameAt(c, false); reason == "" {
			return c
		}
		off = c + 1
	}
	return s.size
}

// read returns the n bytes at off (off+n <= size), or fewer if the file
// turns out to be shorter than size, which then shrinks to fit. On a read
// error it sets s.err and returns nil.
func (s *fileScanner) read(off int64, n int) []byte {
	if off >= s.bufOff && off+int64(n) <= s.bufOff+int64(len(s.buf)) {
		return s.buf[off-s.bufOff : off-s.bufOff+int64(n)]
	}
	want := int(min(int64(max(n, windowSize)), s.size-off))
	if cap(s.buf) < want {
		s.buf = make([]byte, want)
	}
	buf := s.buf[:want]
	got, err := s.r.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = fmt.Errorf("deadletter: read %s at offset %d: %w", s.path, off, err)
		s.buf = s.buf[:0]
		return nil
	}
	s.buf, s.bufOff = buf[:got], off
	if got < want {
		s.size = off + int64(got)
	}
	return s.buf[:min(n, got)]
}
