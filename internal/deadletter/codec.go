package deadletter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// The file format (see the package doc): a file header, then frames.
const (
	fileMagic       = "ORDLYDLQ"
	fileVersion     = 1
	fileHeaderSize  = 16 // magic (8), version (4), CRC-32C of the 12 bytes before it (4)
	frameHeaderSize = 12 // marker (4), body length (4), CRC-32C of length and body (4)

	// MaxRecordBytes is the largest encoded record body a frame holds
	// (a Kafka record is at most max.message.bytes, 1 MiB by default).
	MaxRecordBytes = 64 << 20
)

// frameMarker starts every frame; after damage, a scan resynchronises at
// the next marker whose frame's checksum holds.
var frameMarker = [4]byte{0xD1, 0xE7, 0x0D, 0x1E}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrVersion: the file was written by a newer Orderly, in a format this
// one does not read.
var ErrVersion = errors.New("unsupported dead-letter file version")

// ErrTooLarge: a record does not fit MaxRecordBytes.
var ErrTooLarge = errors.New("record too large for the dead-letter store")

func fileHeader() []byte {
	b := make([]byte, fileHeaderSize)
	copy(b, fileMagic)
	binary.BigEndian.PutUint32(b[8:], fileVersion)
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
	return b
}

// checkFileHeader reports whether b (fileHeaderSize bytes) is a good
// header of this version. A header whose checksum holds but whose version
// is another is ErrVersion; any other mismatch is damage (ok false).
func checkFileHeader(b []byte) (ok bool, err error) {
	if len(b) < fileHeaderSize || string(b[:8]) != fileMagic ||
		binary.BigEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], castagnoli) {
		return false, nil
	}
	if v := binary.BigEndian.Uint32(b[8:]); v != fileVersion {
		return false, fmt.Errorf("%w %d (this build reads version %d)", ErrVersion, v, fileVersion)
	}
	return true, nil
}

// appendFrame appends r's frame to dst.
func appendFrame(dst []byte, r Record) ([]byte, error) {
	start := len(dst)
	dst = append(dst, frameMarker[:]...)
	dst = append(dst, make([]byte, 8)...) // length and CRC, filled in below
	dst = appendBody(dst, r)
	n := len(dst) - start - frameHeaderSize
	if n > MaxRecordBytes {
		return dst[:start], fmt.Errorf("%w: %d bytes encoded, at most %d", ErrTooLarge, n, MaxRecordBytes)
	}
	binary.BigEndian.PutUint32(dst[start+4:], uint32(n))
	binary.BigEndian.PutUint32(dst[start+8:], frameCRC(dst[start+4:start+8], dst[start+frameHeaderSize:]))
	return dst, nil
}

// frameCRC is the checksum a frame with this length field and body
// carries.
func frameCRC(lenField, body []byte) uint32 {
	return crc32.Update(crc32.Checksum(lenField, castagnoli), castagnoli, body)
}

// appendBody encodes r: the timestamp as Unix seconds (int64) and
// nanoseconds (uint32), big-endian; key and value as optional bytes; a
// uvarint header count and each header's key and value as optional bytes.
// Optional bytes are a uvarint 0 for nil, else len+1 and the bytes, so
// nil and empty stay distinct.
func appendBody(dst []byte, r Record) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Timestamp.Unix()))
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.Timestamp.Nanosecond()))
	dst = appendOptional(dst, r.Key)
	dst = appendOptional(dst, r.Value)
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = appendOptional(dst, h.Key)
		dst = appendOptional(dst, h.Value)
	}
	return dst
}

func appendOptional(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b))+1)
	return append(dst, b...)
}

// errBody is wrapped by decodeBody's errors.
var errBody = errors.New("malformed record")

// decodeBody decodes a record body. The record's slices point into b
// (each capped at its own end, so appending to one never overwrites
// another): the caller gives it a buffer the record may keep.
func decodeBody(b []byte) (Record, error) {
	if len(b) < 12 {
		return Record{}, fmt.Errorf("%w: %d bytes, too short for a timestamp", errBody, len(b))
	}
	sec := int64(binary.BigEndian.Uint64(b))
	nsec := binary.BigEndian.Uint32(b[8:])
	if nsec >= 1e9 {
		return Record{}, fmt.Errorf("%w: timestamp nanoseconds %d", errBody, nsec)
	}
	r := Record{Timestamp: time.Unix(sec, int64(nsec)).UTC()}
	d := decoder{b: b, off: 12}
	r.Key = d.optional()
	r.Value = d.optional()
	n := d.uvarint()
	// Each header takes at least 2 bytes: never allocate for more than
	// the body can hold.
	if d.err == nil && n > uint64(len(b)-d.off)/2 {
		d.fail("%d headers in %d bytes", n, len(b)-d.off)
	}
	if d.err == nil && n > 0 {
		r.Headers = make([]Header, n)
		for i := range r.Headers {
			r.Headers[i] = Header{Key: d.optional(), Value: d.optional()}
		}
	}
	if d.err == nil && d.off != len(b) {
		d.fail("%d bytes after the last header", len(b)-d.off)
	}
	if d.err != nil {
		return Record{}, d.err
	}
	return r, nil
}

// decoder reads a body; its first error sticks.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w at byte %d: %s", errBody, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) optional() []byte {
	v := d.uvarint()
	if d.err != nil || v == 0 {
		return nil
	}
	if v-1 > uint64(len(d.b)-d.off) || v-1 > math.MaxInt32 {
		d.fail("length %d past the end (%d bytes left)", v-1, len(d.b)-d.off)
		return nil
	}
	end := d.off + int(v-1)
	out := d.b[d.off:end:end]
	d.off = end
	return out
}
