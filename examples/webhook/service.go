package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
)

// The webhook service: it receives order events in JSON batches, as
// `orderly consume --http URL --size N` POSTs them, and moves each order
// through its states. An event that does not follow from the order's
// state (shipped before paid) is a bug upstream: the service rejects that
// item (the per-item outcome "reject"), and consume dead-letters it. With
// Orderly's per-key order that never happens; a consumer without it would
// see it all the time.

// states an order goes through, in order.
var states = []string{"created", "paid", "shipped", "delivered"}

// event is the value of a record: key = order id.
type event struct {
	Order  string `json:"order"`
	Status string `json:"status"`
}

// record is one element of the batch consume POSTs (see the README's
// "Without Go"): the fields this service reads.
type record struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	Key       *string `json:"key"`
	Value     *string `json:"value"`
	Attempt   int     `json:"attempt"`
}

// outcome is an item of the response's "items": what became of one
// record of the batch; the records not named are done.
type outcome struct {
	Index   int    `json:"index"`
	Outcome string `json:"outcome"` // retry, defer, reject
	Error   string `json:"error,omitempty"`
}

type service struct {
	fail float64 // share of requests answered 500 (a flaky database)

	mu     sync.Mutex
	state  map[string]int              // order -> index in states of its last event, -1 none
	seen   map[string]map[int64]string // order -> offsets applied, to tell a redelivery
	bad    int                         // events out of order (rejected)
	dupes  int                         // redeliveries recognised and acknowledged
	events int                         // events applied

	requests, failed atomic.Int64
}

func newService(fail float64) *service {
	return &service{fail: fail, state: map[string]int{}, seen: map[string]map[int64]string{}}
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST a JSON batch", http.StatusMethodNotAllowed)
		return
	}
	s.requests.Add(1)
	if rand.Float64() < s.fail {
		s.failed.Add(1)
		http.Error(w, "database unavailable", http.StatusInternalServerError) // consume retries the batch
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var batch []record
	if err := json.Unmarshal(body, &batch); err != nil {
		http.Error(w, "not a JSON batch: "+err.Error(), http.StatusBadRequest) // consume dead-letters it
		return
	}
	var outs []outcome
	s.mu.Lock()
	for i, rec := range batch {
		if err := s.apply(rec); err != nil {
			outs = append(outs, outcome{Index: i, Outcome: "reject", Error: err.Error()})
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string][]outcome{"items": outs}) //nolint:errcheck // the client went away
}

// apply moves an order to the event's state; s.mu is held.
func (s *service) apply(rec record) error {
	var ev event
	if rec.Value == nil || json.Unmarshal([]byte(*rec.Value), &ev) != nil || ev.Order == "" {
		return fmt.Errorf("offset %d: not an order event", rec.Offset)
	}
	if s.seen[ev.Order] == nil {
		s.seen[ev.Order] = map[int64]string{}
	}
	if st, ok := s.seen[ev.Order][rec.Offset]; ok && st == ev.Status {
		s.dupes++ // delivered again (at least once): already applied
		return nil
	}
	next := stateIndex(ev.Status)
	cur, ok := s.state[ev.Order]
	if !ok {
		cur = -1
	}
	if next != cur+1 {
		s.bad++
		return fmt.Errorf("order %s: %s after %s", ev.Order, ev.Status, stateName(cur))
	}
	s.state[ev.Order] = next
	s.seen[ev.Order][rec.Offset] = ev.Status
	s.events++
	return nil
}

func stateIndex(s string) int {
	for i, st := range states {
		if st == s {
			return i
		}
	}
	return -2 // never follows anything
}

func stateName(i int) string {
	if i < 0 {
		return "nothing"
	}
	return states[i]
}

// report is what the service saw.
type report struct {
	orders, complete, events, bad, dupes int
	requests, failed                     int64
}

func (s *service) report() report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := report{orders: len(s.state), events: s.events, bad: s.bad, dupes: s.dupes,
		requests: s.requests.Load(), failed: s.failed.Load()}
	for _, st := range s.state {
		if st == len(states)-1 {
			r.complete++
		}
	}
	return r
}
