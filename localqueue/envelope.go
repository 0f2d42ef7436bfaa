package localqueue

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// The envelope is how a message is stored in the backend (go-diskqueue adds
// its own 4-byte record length in front). All integers are big-endian:
//
//	offset  size  field
//	0       1     version (envelopeVersion)
//	1       16    ID
//	17      8     Timestamp, Unix nanoseconds
//	25      4     Attempts (deliveries so far)
//	29      8     Due, Unix nanoseconds
//	37      4     body length n
//	41      n     body
//	41+n    4     CRC-32C of bytes [0, 41+n)
//
// The body length must account for every remaining byte and the checksum
// must match, so a torn write, a record boundary lost in the middle of a
// file or plain garbage is reported as ErrCorrupt instead of being handed
// out as a message.
const (
	envelopeVersion  = 1
	envelopeHeader   = 41
	envelopeOverhead = envelopeHeader + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// envelopeSize is the encoded size of a body of n bytes.
func envelopeSize(n int) int { return envelopeOverhead + n }

// appendEnvelope appends the encoding of m to dst.
func appendEnvelope(dst []byte, m *Message) []byte {
	start := len(dst)
	dst = append(dst, envelopeVersion)
	dst = append(dst, m.ID[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Timestamp.UnixNano()))
	dst = binary.BigEndian.AppendUint32(dst, clampAttempts(m.Attempts))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Due.UnixNano()))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// clampAttempts fits a delivery count into the 4 bytes the formats give it.
func clampAttempts(n int) uint32 {
	if n >= 0 && uint64(n) < math.MaxUint32 {
		return uint32(n)
	}
	return math.MaxUint32
}

// decodeEnvelope parses b into m. m.Body aliases b (backends hand over a
// fresh slice per record). Errors wrap ErrCorrupt.
func decodeEnvelope(b []byte, m *Message) error {
	if len(b) < envelopeOverhead {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte envelope", ErrCorrupt, len(b), envelopeOverhead)
	}
	if v := b[0]; v != envelopeVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrCorrupt, v, envelopeVersion)
	}
	n := binary.BigEndian.Uint32(b[37:41])
	if uint64(n) != uint64(len(b)-envelopeOverhead) {
		return fmt.Errorf("%w: body length %d, but %d bytes follow the header", ErrCorrupt, n, len(b)-envelopeOverhead)
	}
	end := envelopeHeader + int(n)
	if got, want := crc32.Checksum(b[:end], castagnoli), binary.BigEndian.Uint32(b[end:]); got != want {
		return fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	copy(m.ID[:], b[1:17])
	m.Timestamp = time.Unix(0, int64(binary.BigEndian.Uint64(b[17:25])))
	m.Attempts = int(binary.BigEndian.Uint32(b[25:29]))
	m.Due = time.Unix(0, int64(binary.BigEndian.Uint64(b[29:37])))
	m.Body = b[envelopeHeader:end:end]
	m.Deadline = time.Time{}
	return nil
}

// A filler takes the place in the backend of a record whose write failed
// (see backendWriter): the same bytes, but with the checksum xored with
// fillerMask, so that it never decodes as what it copies. isFiller
// recognises it whole, and also torn the way go-diskqueue tears it: the
// failed write's head in place of its own. As the two differ only in the
// checksum, a torn filler is the filler, unless the head reaches 1 to 3
// bytes into the checksum: its checksum then differs from the record's
// by the mask's last 3, 2 or 1 bytes.
const fillerMask = 0x46494c4c // "FILL"

// appendFiller appends to dst the filler of the backend record rec (an
// envelope or a marker, at least 4 bytes).
func appendFiller(dst, rec []byte) []byte {
	dst = append(dst, rec...)
	sum := dst[len(dst)-4:]
	binary.BigEndian.PutUint32(sum, binary.BigEndian.Uint32(sum)^fillerMask)
	return dst
}

// isFiller reports whether the backend record b is a filler, whole or
// torn.
func isFiller(b []byte) bool {
	n := len(b) - 4
	if n < 0 {
		return false
	}
	switch binary.BigEndian.Uint32(b[n:]) ^ crc32.Checksum(b[:n], castagnoli) {
	case fillerMask, fillerMask & 0xffffff, fillerMask & 0xffff, fillerMask & 0xff:
		return true
	}
	return false
}
