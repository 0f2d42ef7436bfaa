package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hit is one request an endpoint received, with the record's coordinates
// (from the Kafka-* headers of a --size 1 request, or the batch's JSON).
type hit struct {
	n           int       // arrival order
	at, end     time.Time // arrival, and when its answer was decided after the delay
	topic       string
	partition   int32
	offset      int64
	key, value  string
	attempt     int
	status      int
	batch       int // records in the request (1 for raw requests)
	contentType string
	keyBase64   bool   // the key came base64-encoded
	auth        string // the request's Authorization header
}

// answer decides the response to a request (its records, in the order
// sent): its status, headers and body.
type answer func(hs []hit) (status int, header http.Header, body string)

// endpoint is an httptest server that records every record it is sent
// and checks that no two requests for one key are ever in flight at once.
type endpoint struct {
	srv    *httptest.Server
	answer answer
	delay  time.Duration // each request takes this long

	mu         sync.Mutex
	n          int
	hits       []hit
	inflight   map[string]int
	concurrent []string     // keys that had two requests in flight at once
	bodies     [][]byte     // of every request, in arrival order
	conns      atomic.Int64 // connections accepted
}

func newEndpoint(t *testing.T, delay time.Duration, a answer) *endpoint {
	t.Helper()
	return startEndpoint(t, delay, a, false)
}

// startEndpoint is newEndpoint, serving HTTPS when tls is set (with
// httptest's certificate: e.srv.Certificate()).
func startEndpoint(t *testing.T, delay time.Duration, a answer, tls bool) *endpoint {
	t.Helper()
	e := &endpoint{answer: a, delay: delay, inflight: map[string]int{}}
	e.srv = httptest.NewUnstartedServer(e)
	e.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			e.conns.Add(1)
		}
	}
	if tls {
		// The start-up check's bare TCP dial is logged as a failed
		// handshake: not an error here.
		e.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		e.srv.StartTLS()
	} else {
		e.srv.Start()
	}
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) url() string { return e.srv.URL + "/hook" }

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	recs, err := parseRequest(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusTeapot)
		return
	}
	now := time.Now()
	e.mu.Lock()
	e.bodies = append(e.bodies, body)
	keys := map[string]bool{}
	for i := range recs {
		recs[i].n, recs[i].at, recs[i].batch = e.n, now, len(recs)
		recs[i].contentType = r.Header.Get("Content-Type")
		recs[i].auth = r.Header.Get("Authorization")
		keys[recs[i].key] = true
	}
	for k := range keys {
		if e.inflight[k] > 0 {
			e.concurrent = append(e.concurrent, k)
		}
		e.inflight[k]++
	}
	e.n++
	status, hdr, respBody := e.answer(recs)
	e.mu.Unlock()
	if e.delay > 0 {
		time.Sleep(e.delay)
	}
	e.mu.Lock()
	end := time.Now()
	for i := range recs {
		recs[i].status, recs[i].end = status, end
		e.hits = append(e.hits, recs[i])
	}
	for k := range keys {
		e.inflight[k]--
	}
	e.mu.Unlock()
	for k, v := range hdr {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	io.WriteString(w, respBody)
}

// parseRequest reads the records of a raw (--size 1) or JSON request.
func parseRequest(r *http.Request, body []byte) ([]hit, error) {
	if r.Header.Get("Kafka-Topic") != "" {
		h := hit{topic: r.Header.Get("Kafka-Topic"), value: string(body)}
		p, err1 := strconv.Atoi(r.Header.Get("Kafka-Partition"))
		o, err2 := strconv.ParseInt(r.Header.Get("Kafka-Offset"), 10, 64)
		a, err3 := strconv.Atoi(r.Header.Get("Kafka-Attempt"))
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("bad Kafka-* headers: %v", r.Header)
		}
		h.partition, h.offset, h.attempt = int32(p), o, a
		if _, err := time.Parse(timestampFormat, r.Header.Get("Kafka-Timestamp")); err != nil {
			return nil, fmt.Errorf("bad Kafka-Timestamp: %w", err)
		}
		h.key = r.Header.Get("Kafka-Key")
		h.keyBase64 = r.Header.Get("Kafka-Key-Encoding") == "base64"
		if h.keyBase64 {
			k, err := base64.StdEncoding.DecodeString(h.key)
			if err != nil {
				return nil, err
			}
			h.key = string(k)
		}
		return []hit{h}, nil
	}
	var recs []recordJSON
	if err := json.Unmarshal(body, &recs); err != nil {
		return nil, fmt.Errorf("batch body: %w", err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("empty batch")
	}
	out := make([]hit, len(recs))
	for i, rec := range recs {
		out[i] = hit{topic: rec.Topic, partition: rec.Partition, offset: rec.Offset, attempt: rec.Attempt}
		if rec.Key != nil {
			out[i].key = *rec.Key
			if rec.KeyBase64 {
				k, err := base64.StdEncoding.DecodeString(*rec.Key)
				if err != nil {
					return nil, err
				}
				out[i].key, out[i].keyBase64 = string(k), true
			}
		}
		if rec.Value != nil {
			out[i].value = *rec.Value
		}
	}
	return out, nil
}

// snapshot returns the hits so far, in arrival order.
func (e *endpoint) snapshot() []hit {
	e.mu.Lock()
	defer e.mu.Unlock()
	hs := slices.Clone(e.hits)
	slices.SortStableFunc(hs, func(a, b hit) int { return a.n - b.n })
	return hs
}

// okCount is how many records were answered 2xx.
func (e *endpoint) okCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, h := range e.hits {
		if h.status/100 == 2 {
			n++
		}
	}
	return n
}

type coord struct {
	topic     string
	partition int32
	offset    int64
}

func (h hit) coord() coord { return coord{h.topic, h.partition, h.offset} }

// checkKeyOrder fails the test if a key's records reached the endpoint
// out of offset order, or two of its requests were in flight at once:
// per key, the offsets of successive requests never go back (a retry
// repeats an offset, it never jumps behind).
func checkKeyOrder(t *testing.T, e *endpoint, hits []hit) {
	t.Helper()
	e.mu.Lock()
	if len(e.concurrent) > 0 {
		t.Errorf("keys with two requests in flight at once: %v", e.concurrent)
	}
	e.mu.Unlock()
	last := map[string]hit{}
	bad := 0
	for _, h := range hits {
		if p, ok := last[h.key]; ok && (p.partition != h.partition || h.offset < p.offset ||
			h.offset > p.offset && p.status/100 != 2 && p.status != http.StatusBadRequest) {
			if bad++; bad <= 5 {
				t.Errorf("key %q: got offset %d (attempt %d) after offset %d answered %d, want offsets in order, a failed one first again",
					h.key, h.offset, h.attempt, p.offset, p.status)
			}
		}
		last[h.key] = h
	}
}
