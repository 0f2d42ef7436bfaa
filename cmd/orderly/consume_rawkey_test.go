package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestConsumeNullAndEmptyKeys: what README's `orderly consume` says of
// records without a key. With --ordering key (the default) a record with
// a null key and one with an empty key are in the same lane of their
// partition (the lane is a hash of the key, and both hash as no bytes):
// they go one call at a time, in offset order, however many --num. Raw
// --http tells them apart: a null key sends no Kafka-Key header, an empty
// key an empty one.
func TestConsumeNullAndEmptyKeys(t *testing.T) {
	t.Parallel()
	const n = 16
	type req struct {
		offset int64
		hasKey bool
		key    string
	}
	var (
		mu            sync.Mutex
		reqs          []req
		running, most int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, _ := strconv.ParseInt(r.Header.Get("Kafka-Offset"), 10, 64)
		k, has := r.Header["Kafka-Key"]
		key := ""
		if has {
			key = k[0]
		}
		mu.Lock()
		reqs = append(reqs, req{off, has, key})
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // long enough for another lane's call to overlap
		mu.Lock()
		running--
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)

	b := newTopic(t, "nokey", 1)
	var recs []*sarama.ProducerMessage
	for i := range n {
		m := &sarama.ProducerMessage{Topic: "nokey", Value: sarama.StringEncoder(strconv.Itoa(i))}
		if i%2 == 1 {
			m.Key = sarama.ByteEncoder([]byte{}) // empty, not null
		}
		recs = append(recs, m)
	}
	produceRecords(t, b, recs...)
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "nokey", "--group", "nokey",
		"--http", srv.URL, "--num", "8", "--progress", "off", "--log-level", "warn")
	p.waitCommitted(b, "nokey", "nokey")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.output())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != n || most != 1 {
		t.Errorf("got %d requests, at most %d at once; want %d, one at a time (null and empty keys share a lane)", len(reqs), most, n)
	}
	for i, r := range reqs {
		if r.offset != int64(i) {
			t.Errorf("request %d: offset %d, want %d (offset order)", i, r.offset, i)
		}
		if empty := r.offset%2 == 1; r.hasKey != empty || r.key != "" {
			t.Errorf("offset %d (empty key %v): got Kafka-Key present %v, %q; want present only for the empty key, and empty", r.offset, empty, r.hasKey, r.key)
		}
	}
}
