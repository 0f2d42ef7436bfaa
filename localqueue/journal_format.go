package localqueue

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// The journal (<Name>.journal in DataPath) records the messages the backend
// no longer holds: in flight after a Get took them from go-diskqueue,
// deferred, or handed back to the memory chan or the backend after either.
// It starts with a 16-byte header and is a sequence of records; all
// integers are big-endian:
//
//	header: "LQJOURNL" | version u32 (journalVersion) | CRC-32C of the first 12 bytes u32
//	record: length n u32 | CRC-32C of (length, payload) u32 | payload (n bytes)
//	payload: version u8 (journalVersion) | kind u8 | fields of the kind
//
//	kind        fields                                      meaning
//	1 COPY      state u8 | envelope (see envelope.go)        the message is journaled here, with its body
//	2 MOVE      state u8 | ID | attempts u32 | due i64 ns     a journaled message changed state
//	3 FIN       ID                                          finished or dead-lettered: no longer journaled
//	4           unused (an earlier draft's GEN): corrupt
//	5 HIST      ID                                          backend copies of ID read before the next Open's marker are stale
//	6 SWAP      state u8 | replaced ID | envelope            a COPY of a new message and the FIN of the one it replaces (Replace)
//
// A SWAP is one record so that a crash or a power loss keeps either the
// replaced message or its replacement, never both and never neither. A
// build older than SWAP reads one as damage and skips it: it brings back
// the replaced message (with its older body) instead of the new one, so
// an older build can still open a newer journal without losing messages.
// state is stateInFlight, stateDeferred or stateReady (handed back to the
// memory chan or the backend by a requeue or timeout, due at due). The CRC
// covers the length, so a damaged length is caught too; a record that
// fails any check is corrupt, and replay looks for the next good record
// after it (see replay).
const (
	journalMagic      = "LQJOURNL"
	journalVersion    = 1
	journalHeaderSize = 16
	recordHeaderSize  = 8 // length, CRC

	kindCopy = 1
	kindMove = 2
	kindFin  = 3
	kindHist = 5
	kindSwap = 6

	stateInFlight = 1
	stateDeferred = 2
	stateReady    = 3

	copyFixed = 3                // version, kind, state
	swapFixed = copyFixed + 16   // version, kind, state, replaced ID
	moveSize  = 3 + 16 + 4 + 8   // version, kind, state, ID, attempts, due
	finSize   = 2 + 16           // version, kind, ID
	histSize  = finSize          // version, kind, ID
	maxRecord = 1<<30 + 64 + 512 // above any COPY of a MaxMsgSize (at most 1 GiB) body
)

// jrec is one decoded journal record. For a COPY, m holds the message and
// m.Body aliases the decoded bytes.
type jrec struct {
	kind     byte
	state    byte
	id       ID
	replaced ID // SWAP: the message it finishes
	attempts int
	due      time.Time
	m        Message
}

// journalHeader returns the 16-byte file header.
func journalHeader() []byte {
	b := append([]byte(journalMagic), 0, 0, 0, journalVersion)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// checkJournalHeader reports whether b starts with a valid header.
func checkJournalHeader(b []byte) error {
	if len(b) < journalHeaderSize {
		return fmt.Errorf("%w: header of %d bytes, want %d", ErrCorruptJournal, len(b), journalHeaderSize)
	}
	if string(b[:8]) != journalMagic {
		return fmt.Errorf("%w: magic %q, want %q", ErrCorruptJournal, b[:8], journalMagic)
	}
	if got, want := crc32.Checksum(b[:12], castagnoli), binary.BigEndian.Uint32(b[12:16]); got != want {
		return fmt.Errorf("%w: header checksum %08x, want %08x", ErrCorruptJournal, got, want)
	}
	if v := binary.BigEndian.Uint32(b[8:12]); v != journalVersion {
		return fmt.Errorf("%w: format version %d, want %d", ErrCorruptJournal, v, journalVersion)
	}
	return nil
}

// beginRecord appends a record header placeholder and the payload's
// version and kind; endRecord fills in the length and checksum.
func beginRecord(dst []byte, kind byte) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, journalVersion, kind)
	return dst, start
}

func endRecord(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-recordHeaderSize))
	crc := crc32.Update(crc32.Checksum(dst[start:start+4], castagnoli), castagnoli, dst[start+recordHeaderSize:])
	binary.BigEndian.PutUint32(dst[start+4:], crc)
	return dst
}

// appendCopy appends a COPY record of m in state.
func appendCopy(dst []byte, state byte, m *Message) []byte {
	dst, start := beginRecord(dst, kindCopy)
	dst = append(dst, state)
	dst = appendEnvelope(dst, m)
	return endRecord(dst, start)
}

// appendSwap appends a SWAP record: m in state, replacing old.
func appendSwap(dst []byte, state byte, old ID, m *Message) []byte {
	dst, start := beginRecord(dst, kindSwap)
	dst = append(dst, state)
	dst = append(dst, old[:]...)
	dst = appendEnvelope(dst, m)
	return endRecord(dst, start)
}

// copySize is the encoded size of a COPY record of a body of n bytes.
func copySize(n int) int { return recordHeaderSize + copyFixed + envelopeSize(n) }

func appendMove(dst []byte, state byte, id ID, attempts int, due time.Time) []byte {
	dst, start := beginRecord(dst, kindMove)
	dst = append(dst, state)
	dst = append(dst, id[:]...)
	dst = binary.BigEndian.AppendUint32(dst, clampAttempts(attempts))
	dst = binary.BigEndian.AppendUint64(dst, uint64(due.UnixNano()))
	return endRecord(dst, start)
}

func appendFin(dst []byte, id ID) []byte { return appendIDRecord(dst, kindFin, id) }

func appendHist(dst []byte, id ID) []byte { return appendIDRecord(dst, kindHist, id) }

func appendIDRecord(dst []byte, kind byte, id ID) []byte {
	dst, start := beginRecord(dst, kind)
	dst = append(dst, id[:]...)
	return endRecord(dst, start)
}

// decodeJournalRecord decodes the record at the start of b into r and
// returns its encoded size. It never reads past b. Errors wrap
// ErrCorruptJournal; a record cut short by the end of b wraps errTruncated
// too, so that replay can tell a torn tail from damage in the middle.
func decodeJournalRecord(b []byte, r *jrec) (int, error) {
	if len(b) < recordHeaderSize {
		return 0, fmt.Errorf("%w: %d bytes left, want a %d-byte record header", errTruncated, len(b), recordHeaderSize)
	}
	n := binary.BigEndian.Uint32(b)
	if n < 2 || n > maxRecord {
		return 0, fmt.Errorf("%w: record length %d", ErrCorruptJournal, n)
	}
	size := recordHeaderSize + int(n)
	if len(b) < size {
		return 0, fmt.Errorf("%w: record of %d bytes, %d left", errTruncated, size, len(b))
	}
	p := b[recordHeaderSize:size]
	crc := crc32.Update(crc32.Checksum(b[:4], castagnoli), castagnoli, p)
	if want := binary.BigEndian.Uint32(b[4:8]); crc != want {
		return 0, fmt.Errorf("%w: record checksum %08x, want %08x", ErrCorruptJournal, crc, want)
	}
	if p[0] != journalVersion {
		return 0, fmt.Errorf("%w: record version %d, want %d", ErrCorruptJournal, p[0], journalVersion)
	}
	*r = jrec{kind: p[1]}
	bad := func(want int) error {
		return fmt.Errorf("%w: kind %d record of %d bytes, want %d", ErrCorruptJournal, r.kind, len(p), want)
	}
	switch r.kind {
	case kindCopy:
		if len(p) < copyFixed+envelopeOverhead {
			return 0, bad(copyFixed + envelopeOverhead)
		}
		r.state = p[2]
		if err := decodeEnvelope(p[copyFixed:], &r.m); err != nil {
			return 0, fmt.Errorf("%w: COPY envelope: %w", ErrCorruptJournal, err)
		}
		r.id, r.attempts, r.due = r.m.ID, r.m.Attempts, r.m.Due
	case kindSwap:
		if len(p) < swapFixed+envelopeOverhead {
			return 0, bad(swapFixed + envelopeOverhead)
		}
		r.state = p[2]
		copy(r.replaced[:], p[3:swapFixed])
		if err := decodeEnvelope(p[swapFixed:], &r.m); err != nil {
			return 0, fmt.Errorf("%w: SWAP envelope: %w", ErrCorruptJournal, err)
		}
		r.id, r.attempts, r.due = r.m.ID, r.m.Attempts, r.m.Due
	case kindMove:
		if len(p) != moveSize {
			return 0, bad(moveSize)
		}
		r.state = p[2]
		copy(r.id[:], p[3:19])
		r.attempts = int(binary.BigEndian.Uint32(p[19:23]))
		r.due = time.Unix(0, int64(binary.BigEndian.Uint64(p[23:31])))
	case kindFin, kindHist:
		if len(p) != finSize {
			return 0, bad(finSize)
		}
		copy(r.id[:], p[2:18])
	default:
		return 0, fmt.Errorf("%w: unknown record kind %d", ErrCorruptJournal, r.kind)
	}
	if (r.kind == kindCopy || r.kind == kindMove || r.kind == kindSwap) && (r.state < stateInFlight || r.state > stateReady) {
		return 0, fmt.Errorf("%w: unknown state %d", ErrCorruptJournal, r.state)
	}
	return size, nil
}

// The backend marker is a record Open writes to the backend when backend
// records older than it may be stale copies of journaled messages (see
// dedup in journal_replay.go): markerVersion | nonce u64 | zero padding |
// CRC-32C u32, padded to envelopeOverhead because go-diskqueue rejects
// shorter records. Envelopes start with envelopeVersion, so the first byte
// tells the two apart.
const (
	markerVersion = 0xA5
	markerSize    = envelopeOverhead
)

func appendMarker(dst []byte, nonce uint64) []byte {
	start := len(dst)
	dst = append(dst, markerVersion)
	dst = binary.BigEndian.AppendUint64(dst, nonce)
	dst = append(dst, make([]byte, markerSize-4-9)...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodeMarker reports the nonce of a backend marker, and false for
// anything else.
func decodeMarker(b []byte) (uint64, bool) {
	if len(b) != markerSize || b[0] != markerVersion {
		return 0, false
	}
	if crc32.Checksum(b[:markerSize-4], castagnoli) != binary.BigEndian.Uint32(b[markerSize-4:]) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[1:9]), true
}
