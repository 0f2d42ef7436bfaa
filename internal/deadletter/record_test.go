package deadletter

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func h(k, v string) Header { return Header{Key: []byte(k), Value: []byte(v)} }

// info is a typical Info, with millisecond timestamps (what the headers
// keep).
func info() Info {
	return Info{
		Topic: "orders", Partition: 3, Offset: 1042,
		Timestamp: time.Date(2026, 1, 2, 15, 4, 5, 123e6, time.UTC),
		Group:     "ledger", Attempts: 3, Reason: ReasonMaxAttempts, Message: "insert: deadlock detected",
		FirstFailure: time.Date(2026, 1, 2, 15, 3, 59, 7e6, time.UTC),
	}
}

// TestHeadersRoundTrip: Headers then ParseInfo gives back the Info (the
// message cut to 1 KiB at a rune boundary), Original gives back the
// original headers minus earlier __orderly.errors.* ones, and every added
// header is text as documented.
func TestHeadersRoundTrip(t *testing.T) {
	long := strings.Repeat("é", 5*1024/2)    // 5 KiB of 2-byte runes
	odd := "xx" + strings.Repeat("日本", 1000) // runes start at 2, 5, 8, ...
	tests := []struct {
		name     string
		orig     []Header
		info     Info
		wantOrig []Header
		wantMsg  string
	}{
		{"no headers", nil, info(), []Header{}, info().Message},
		{"headers kept in order", []Header{h("trace", "abc"), h("b", "")}, info(), []Header{h("trace", "abc"), h("b", "")}, info().Message},
		{"null header value", []Header{{Key: []byte("n")}}, info(), []Header{{Key: []byte("n")}}, info().Message},
		{"earlier dead-letter headers replaced",
			[]Header{h("a", "1"), h(HeaderReason, "poison"), h(HeaderAttempts, "9"), h(HeaderPrefix+"custom", "x"), h("b", "2")},
			info(), []Header{h("a", "1"), h("b", "2")}, info().Message},
		{"5 KiB message cut to 1 KiB", nil, func() Info { i := info(); i.Message = long; return i }(), []Header{}, long[:1020] + "…"},
		{"3-byte runes cut at a boundary", nil, func() Info { i := info(); i.Message = odd; return i }(), []Header{}, odd[:1019] + "…"},
		{"zero times and empty fields", nil, Info{Topic: "t", Reason: ReasonPoison}, []Header{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := Headers(tt.orig, tt.info)
			if n := len(hs) - len(tt.wantOrig); n != len(headerNames) {
				t.Fatalf("Headers added %d headers, want %d: %q", n, len(headerNames), hs)
			}
			for i, name := range headerNames {
				if got := string(hs[len(tt.wantOrig)+i].Key); got != name {
					t.Errorf("header %d is %q, want %q", i, got, name)
				}
			}
			if got := Original(hs); !reflect.DeepEqual(got, tt.wantOrig) {
				t.Errorf("Original = %q, want %q", got, tt.wantOrig)
			}
			got, err := ParseInfo(hs)
			if err != nil {
				t.Fatalf("ParseInfo: %v", err)
			}
			want := tt.info
			want.Message = tt.wantMsg
			if want.Timestamp.IsZero() {
				want.Timestamp, want.FirstFailure = time.Time{}.UTC(), time.Time{}.UTC()
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ParseInfo = %+v\nwant %+v", got, want)
			}
			if len(got.Message) > MaxMessage || !utf8.ValidString(got.Message) {
				t.Errorf("message of %d bytes (valid UTF-8: %v), want at most %d of UTF-8", len(got.Message), utf8.ValidString(got.Message), MaxMessage)
			}
		})
	}
}

// TestHeaderText: the values are what an operator reading them with kcat
// expects.
func TestHeaderText(t *testing.T) {
	got := map[string]string{}
	for _, x := range Headers(nil, info()) {
		got[string(x.Key)] = string(x.Value)
	}
	want := map[string]string{
		HeaderTopic: "orders", HeaderPartition: "3", HeaderOffset: "1042",
		HeaderTimestamp: "2026-01-02T15:04:05.123Z", HeaderGroup: "ledger", HeaderAttempts: "3",
		HeaderReason: "max_attempts", HeaderMessage: "insert: deadlock detected",
		HeaderFirstFailure: "2026-01-02T15:03:59.007Z",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("headers %q\nwant %q", got, want)
	}
	// A local time zone and nanoseconds: UTC, milliseconds.
	i := info()
	i.Timestamp = time.Date(2026, 1, 2, 16, 4, 5, 123456789, time.FixedZone("CET", 3600))
	for _, x := range Headers(nil, i) {
		if string(x.Key) == HeaderTimestamp && string(x.Value) != "2026-01-02T15:04:05.123Z" {
			t.Errorf("timestamp %q, want 2026-01-02T15:04:05.123Z", x.Value)
		}
	}
}

func TestCutMessageInvalidUTF8(t *testing.T) {
	// Continuation bytes only: no rune start to back up to within 3
	// bytes; the cut still fits.
	s := strings.Repeat("\x80", 2000)
	if got := CutMessage(s); len(got) > MaxMessage {
		t.Errorf("cut to %d bytes, want at most %d", len(got), MaxMessage)
	}
	if got := CutMessage("short"); got != "short" {
		t.Errorf("CutMessage(short) = %q", got)
	}
	exact := strings.Repeat("a", MaxMessage)
	if got := CutMessage(exact); got != exact {
		t.Errorf("a message of exactly %d bytes was cut to %d", MaxMessage, len(got))
	}
}

// TestParseInfoErrors: a missing header is an ErrNotDeadLetter error
// naming every missing one; a bad value names the header and the value.
func TestParseInfoErrors(t *testing.T) {
	good := Headers(nil, info())
	without := func(names ...string) []Header {
		var out []Header
		for _, x := range good {
			if !slices.Contains(names, string(x.Key)) {
				out = append(out, x)
			}
		}
		return out
	}
	with := func(name, value string) []Header {
		return append(append([]Header(nil), good...), h(name, value)) // the last one counts
	}
	tests := []struct {
		name    string
		hs      []Header
		missing bool
		want    []string
	}{
		{"no headers", nil, true, []string{"no __orderly.errors.* headers"}},
		{"foreign headers only", []Header{h("trace", "x")}, true, []string{"no __orderly.errors.* headers"}},
		{"all but one missing", []Header{h(HeaderTopic, "t")}, true, headerNames[1:]},
		{"one missing", without(HeaderAttempts), true, []string{"missing header " + HeaderAttempts + ":"}},
		{"two missing", without(HeaderOffset, HeaderGroup), true, []string{HeaderOffset + ", " + HeaderGroup}},
		{"bad partition", with(HeaderPartition, "three"), false, []string{HeaderPartition, `"three"`, "not a decimal integer"}},
		{"partition out of range", with(HeaderPartition, "4294967296"), false, []string{HeaderPartition, "4294967296"}},
		{"bad offset", with(HeaderOffset, "1.5"), false, []string{HeaderOffset, `"1.5"`}},
		{"bad attempts", with(HeaderAttempts, ""), false, []string{HeaderAttempts, `""`}},
		{"bad timestamp", with(HeaderTimestamp, "yesterday"), false, []string{HeaderTimestamp, `"yesterday"`, "RFC 3339"}},
		{"bad first failure", with(HeaderFirstFailure, "2026-13-01T00:00:00Z"), false, []string{HeaderFirstFailure}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseInfo(tt.hs)
			if err == nil {
				t.Fatal("ParseInfo: no error")
			}
			if got := errors.Is(err, ErrNotDeadLetter); got != tt.missing {
				t.Errorf("errors.Is(%v, ErrNotDeadLetter) = %v, want %v", err, got, tt.missing)
			}
			var he *HeaderError
			if !tt.missing && !errors.As(err, &he) {
				t.Errorf("%v is not a *HeaderError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// An unknown reason is passed on, not rejected.
	if i, err := ParseInfo(with(HeaderReason, "quota")); err != nil || i.Reason != "quota" {
		t.Errorf("unknown reason: %+v, %v", i, err)
	}
}

// TestCut: Cut keeps the front and CutFront the end of a string, each in at
// most n bytes with "…", never splitting a multi-byte rune.
func TestCut(t *testing.T) {
	for _, tt := range []struct {
		s          string
		n          int
		cut, front string
	}{
		{"short", 10, "short", "short"},
		{"exactly10!", 10, "exactly10!", "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg…", "…fghijkl"},
		{"ééééé", 8, "éé…", "…éé"}, // 10 bytes; 5 left for runes of 2
		{"aéééé", 8, "aéé…", "…éé"},
	} {
		if got := Cut(tt.s, tt.n); got != tt.cut || len(got) > tt.n {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.cut)
		}
		if got := CutFront(tt.s, tt.n); got != tt.front || len(got) > tt.n {
			t.Errorf("CutFront(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.front)
		}
	}
}
