package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// A parked message's body (parked.go), version 1:
//
//	byte     version (1)
//	uvarint  length, then the topic
//	varint   partition, offset, timestamp (unix nanos; 0: none), attempt,
//	         first failure (unix nanos; 0: none)
//	bytes    key, then value: a flag byte (0: null, 1: present), then
//	         uvarint length and the bytes
//	uvarint  header count, then each header's key and value as bytes
//
// Only this process reads what it wrote, but a torn or damaged body must
// give an error, never a panic: decodeParked bounds every length by what
// is left.
const parkedVersion = 1

var errParked = errors.New("group: corrupt parked message")

func encodeParked(dst []byte, m *Message, attempt int, first time.Time) []byte {
	dst = append(dst, parkedVersion)
	dst = binary.AppendUvarint(dst, uint64(len(m.Topic)))
	dst = append(dst, m.Topic...)
	dst = binary.AppendVarint(dst, int64(m.Partition))
	dst = binary.AppendVarint(dst, m.Offset)
	dst = binary.AppendVarint(dst, unixNanos(m.Timestamp))
	dst = binary.AppendVarint(dst, int64(attempt))
	dst = binary.AppendVarint(dst, unixNanos(first))
	dst = appendParkedBytes(dst, m.Key)
	dst = appendParkedBytes(dst, m.Value)
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	for _, h := range m.Headers {
		dst = appendParkedBytes(dst, h.Key)
		dst = appendParkedBytes(dst, h.Value)
	}
	return dst
}

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func appendParkedBytes(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decodeParked fills m from a body written by encodeParked, Attempt
// included, so that New sees the attempt the message is on, and returns
// the attempt and first-failure time it carried. m's slices are copies.
func decodeParked(b []byte, m *Message) (attempt int, first time.Time, err error) {
	d := parkedDecoder{b: b}
	if len(b) == 0 || b[0] != parkedVersion {
		return 0, time.Time{}, fmt.Errorf("%w: version", errParked)
	}
	d.b = d.b[1:]
	m.Topic = string(d.bytes(false))
	m.Partition = int32(d.varint())
	m.Offset = d.varint()
	if ts := d.varint(); ts != 0 {
		m.Timestamp = time.Unix(0, ts)
	} else {
		m.Timestamp = time.Time{}
	}
	attempt = int(d.varint())
	m.Attempt = attempt
	if ff := d.varint(); ff != 0 {
		first = time.Unix(0, ff)
	}
	m.Key = d.bytes(true)
	m.Value = d.bytes(true)
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("header count")
	}
	m.Headers = nil
	for i := uint64(0); i < n && d.err == nil; i++ {
		m.Headers = append(m.Headers, Header{Key: d.bytes(true), Value: d.bytes(true)})
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err == nil && (attempt < 1 || m.Partition < 0 || m.Offset < 0) {
		d.fail("attempt, partition or offset")
	}
	return attempt, first, d.err
}

type parkedDecoder struct {
	b   []byte
	err error
}

func (d *parkedDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errParked, what)
	}
	d.b = nil
}

func (d *parkedDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("length")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *parkedDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed byte string; with flagged, preceded by a
// presence flag (absent: nil).
func (d *parkedDecoder) bytes(flagged bool) []byte {
	if d.err != nil {
		return nil
	}
	if flagged {
		if len(d.b) == 0 {
			d.fail("flag")
			return nil
		}
		present := d.b[0]
		d.b = d.b[1:]
		switch present {
		case 0:
			return nil
		case 1:
		default:
			d.fail("flag")
			return nil
		}
	}
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("length")
		return nil
	}
	out := make([]byte, n)
	copy(out, d.b[:n])
	d.b = d.b[n:]
	return out
}
