package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/IBM/sarama"
)

// TestConsumeHTTPRawHeaders: with --size 1 the body is the value alone, so
// what it cannot say travels in headers: Kafka-Tombstone for a null value
// (an empty body is also an empty value), and the record's headers in
// Kafka-Headers, a JSON array in the batches' form (duplicates and order
// kept, binary values base64, keys text with U+FFFD for bytes that are
// not UTF-8), escaped to ASCII, or past 4 KiB of it, its length in
// Kafka-Headers-Omitted. A record without either has neither
// header.
func TestConsumeHTTPRawHeaders(t *testing.T) {
	t.Parallel()
	type got struct {
		body                string
		tombstone, headers  string
		hasTomb, hasHeaders bool
		omitted             string
	}
	var mu sync.Mutex
	byKey := map[string]got{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, tomb := r.Header["Kafka-Tombstone"]
		_, hdrs := r.Header["Kafka-Headers"]
		mu.Lock()
		byKey[r.Header.Get("Kafka-Key")] = got{string(body), r.Header.Get("Kafka-Tombstone"), r.Header.Get("Kafka-Headers"), tomb, hdrs, r.Header.Get("Kafka-Headers-Omitted")}
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)

	b := newTopic(t, "raw", 1)
	hdrs := []sarama.RecordHeader{
		{Key: []byte("trace"), Value: []byte("4bf92f35")},
		{Key: []byte("bin"), Value: []byte("\xff\x00")},
		{Key: []byte("trace"), Value: []byte("second")},
		{Key: []byte("name"), Value: []byte("café ☕ 𝄞")},
		{Key: []byte("del"), Value: []byte("a\x7fb")}, // Go's HTTP client refuses DEL in a header
		{Key: []byte("null")},
		{Key: []byte("k\xff"), Value: []byte("bad key")}, // arrives as "k\ufffd"
	}
	// Headers whose escaped JSON is exactly 4 KiB come; one byte more, they do not.
	blob := func(n int) []sarama.RecordHeader {
		return []sarama.RecordHeader{{Key: []byte("blob"), Value: bytes.Repeat([]byte("x"), n-len(`[{"key":"blob","value":""}]`))}}
	}
	produceRecords(t, b,
		&sarama.ProducerMessage{Topic: "raw", Key: sarama.StringEncoder("plain"), Value: sarama.StringEncoder("v")},
		&sarama.ProducerMessage{Topic: "raw", Key: sarama.StringEncoder("tombstone")},
		&sarama.ProducerMessage{Topic: "raw", Key: sarama.StringEncoder("empty"), Value: sarama.StringEncoder("")},
		&sarama.ProducerMessage{Topic: "raw", Key: sarama.StringEncoder("headers"), Value: sarama.StringEncoder("h"), Headers: hdrs},
		&sarama.ProducerMessage{Topic: "raw", Key: sarama.StringEncoder("at-limit"), Value: sarama.StringEncoder("l"), Headers: blob(4096)},
		&sarama.ProducerMessage{Topic: "raw", Key: sarama.StringEncoder("large"), Value: sarama.StringEncoder("l"), Headers: blob(4097)})
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "raw", "--group", "raw",
		"--http", srv.URL, "--size", "1", "--progress", "off", "--log-level", "warn")
	p.waitCommitted(b, "raw", "raw")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.output())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"plain", "empty", "tombstone", "headers", "at-limit", "large"} {
		if _, ok := byKey[k]; !ok {
			t.Fatalf("no request for the record with key %q", k)
		}
	}
	for k, body := range map[string]string{"plain": "v", "empty": ""} {
		if g := byKey[k]; g.hasTomb || g.hasHeaders || g.body != body {
			t.Errorf("%s: got Kafka-Tombstone %v, Kafka-Headers %v, body %q; want neither and %q", k, g.hasTomb, g.hasHeaders, g.body, body)
		}
	}
	if g := byKey["at-limit"]; len(g.headers) != 4096 || g.omitted != "" {
		t.Errorf("4096 bytes of headers: got Kafka-Headers of %d bytes, Kafka-Headers-Omitted %q; want 4096 bytes, none", len(g.headers), g.omitted)
	}
	if g := byKey["large"]; g.hasHeaders || g.omitted != "4097" || g.body != "l" {
		t.Errorf("4097 bytes of headers: got Kafka-Headers %v, Kafka-Headers-Omitted %q, body %q; want none, 4097, and the value", g.hasHeaders, g.omitted, g.body)
	}
	if g := byKey["tombstone"]; g.tombstone != "true" || g.body != "" || g.hasHeaders {
		t.Errorf("tombstone: got Kafka-Tombstone %q, body %q; want true and empty", g.tombstone, g.body)
	}
	g := byKey["headers"]
	if g.omitted != "" {
		t.Errorf("headers: got Kafka-Headers-Omitted %q, want none", g.omitted)
	}
	for _, c := range g.headers {
		if c < 0x20 || c > 0x7e {
			t.Fatalf("Kafka-Headers %q: got a byte %#x, want printable ASCII only", g.headers, c)
		}
	}
	var hs []headerJSON
	if err := json.Unmarshal([]byte(g.headers), &hs); err != nil {
		t.Fatalf("Kafka-Headers %q: %v", g.headers, err)
	}
	if len(hs) != len(hdrs) {
		t.Fatalf("Kafka-Headers: got %d headers %+v, want %d", len(hs), hs, len(hdrs))
	}
	for i, h := range hdrs {
		if (hs[i].Value == nil) != (h.Value == nil) {
			t.Errorf("Kafka-Headers[%d] %q: got null %v, want %v", i, hs[i].Key, hs[i].Value == nil, h.Value == nil)
			continue
		}
		v := ""
		if hs[i].Value != nil {
			v = *hs[i].Value
		}
		if hs[i].ValueBase64 {
			dec, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			v = string(dec)
		}
		wantKey := strings.ToValidUTF8(string(h.Key), "\ufffd")
		if hs[i].Key != wantKey || v != string(h.Value) {
			t.Errorf("Kafka-Headers[%d]: got %q=%q, want %q=%q", i, hs[i].Key, v, wantKey, h.Value)
		}
	}
}
