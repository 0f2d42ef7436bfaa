package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// maxStrayCheck is how many records a topicCheck reads, at most, looking
// for a dead letter: an ordinary topic named by mistake may be large, and
// refusing it must not read it all.
const maxStrayCheck = 10_000

// maxStrayBytes is how many bytes of records (keys, values and headers) a
// topicCheck reads, at most, looking for a dead letter: past it, it
// refuses the topic as it does after maxStrayCheck records, so that an
// ordinary topic of large records is neither fetched nor held in memory
// 10,000 records deep.
const maxStrayBytes = 32 << 20

// errDeadLetterFound ends the read of a topicCheck without pass at its
// first dead letter; errNoneInSample ends a topicCheck's read after
// maxStrayCheck records, or maxStrayBytes of them, without one.
var (
	errDeadLetterFound = errors.New("found a dead letter")
	errNoneInSample    = errors.New("no dead letter in the sample")
)

// topicCheck sits between a read of a Kafka dead-letter topic and what a
// command does with its records, and refuses the topic when it holds
// records and none of them, as far as it reads, has the dead-letter
// headers (deadletter.ErrNotDeadLetter: none, or not all of them): an
// ordinary topic named by mistake, whose records list and show would
// print as records without an origin, replay --to would copy and purge
// would delete. The error names the first such record and what its
// headers lack.
//
// The first records of the command's own read decide: the check is
// passed at the first dead letter (on a dead-letter topic, its first
// record, unless strays come first), and fails after maxStrayCheck
// records without one, or at the end of a read without one. Until then
// it holds back the records and the read's warnings, so that a command
// prints, copies or deletes nothing of a topic it refuses; once passed,
// it hands them to pass in the order they came, then each as it comes.
// On an ordinary topic it reads, and holds, up to maxStrayCheck records,
// and at most maxStrayBytes of them, before it refuses it.
//
// A stray record on a dead-letter topic (someone produced to it) is no
// reason to refuse the topic: the commands show it as not a dead letter.
// A local store needs no such check: only a consumer writes to it, and
// only dead letters.
type topicCheck struct {
	o  *dlqOpts
	in string // where it reads, for the error: " in partition 2"; "": every partition
	// pass takes the records once the check passed; nil: the read
	// ends at the first dead letter (with errDeadLetterFound), and
	// nothing is held back.
	pass func(*entry) error
	warn io.Writer // takes the read's warnings once the check passed

	passed bool
	found  bool  // it read a dead letter
	n      int   // records read while undecided
	first  entry // the first of them
	held   []held
	bytes  int // the sizes of the records read while undecided
}

// held is a record, or else a warning, read before the check passed.
type held struct {
	e       entry
	warning []byte
}

// record is the read's fn.
func (c *topicCheck) record(e *entry) error {
	if c.passed {
		return c.pass(e)
	}
	if !errors.Is(e.infoErr, deadletter.ErrNotDeadLetter) { // a damaged header value still says it is one
		c.found = true
		if c.pass == nil {
			return errDeadLetterFound
		}
		c.passed = true
		if err := c.release(); err != nil {
			return err
		}
		return c.pass(e)
	}
	if c.n == 0 {
		c.first = *e
	}
	c.n++
	if c.pass != nil {
		c.held = append(c.held, held{e: *e})
	}
	c.bytes += recordSize(&e.rec)
	if c.full() {
		return errNoneInSample
	}
	return nil
}

// full says whether the records read while undecided reached
// maxStrayCheck, or maxStrayBytes: the check stops there.
func (c *topicCheck) full() bool {
	return c.n >= maxStrayCheck || c.bytes >= maxStrayBytes
}

// Write takes a warning of the read: it goes to warn once the check
// passed, and is dropped with the records if the topic is refused.
func (c *topicCheck) Write(p []byte) (int, error) {
	switch {
	case c.passed:
		return c.warn.Write(p)
	case c.pass != nil:
		c.held = append(c.held, held{warning: append([]byte(nil), p...)})
	}
	return len(p), nil
}

// recordSize is what a record costs to fetch and to hold, near enough:
// its key, value and headers.
func recordSize(r *deadletter.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// release hands what was held back to pass and warn, in order.
func (c *topicCheck) release() error {
	held := c.held
	c.held = nil
	for i := range held { // pass may keep the pointer (replay does)
		if held[i].warning != nil {
			if _, err := c.warn.Write(held[i].warning); err != nil {
				return err
			}
		} else if err := c.pass(&held[i].e); err != nil {
			return err
		}
	}
	return nil
}

// end takes the read's error and decides what the check has not: a
// topic with records but no dead letter among those read is refused, an
// empty one passes (what was held back then is its warnings).
func (c *topicCheck) end(err error) error {
	refused, err := c.decide(err)
	if refused {
		return c.refuse(c.counted())
	}
	return err
}

// decide is end without the refusal's error: refused says the topic
// holds records, and no dead letter among those the check read.
func (c *topicCheck) decide(err error) (refused bool, _ error) {
	switch {
	case errors.Is(err, errDeadLetterFound):
		return false, nil
	case errors.Is(err, errNoneInSample):
		return true, nil
	case err != nil, c.passed:
		return false, err
	case c.n == 0:
		c.passed = true
		return false, c.release()
	}
	return true, nil
}

// counted is what the check read without a dead letter among it: "its
// 3 records in partition 2", "the first 10000 of its records".
func (c *topicCheck) counted() string {
	if c.full() {
		return fmt.Sprintf("the first %d of its records%s", c.n, c.in)
	}
	return "its " + plural(c.n, "record") + c.in
}

// refuse is the error that refuses the topic: none of counted has the
// dead-letter headers; it names the first record the check read.
func (c *topicCheck) refuse(counted string) error {
	return fmt.Errorf("%s is not a dead-letter topic: none of %s has the %s* headers of a dead letter (the first, partition %d offset %d: %v)",
		flagArg(c.o.fs, "topic", c.o.topic), counted, deadletter.HeaderPrefix, c.first.partition, c.first.offset, c.first.infoErr)
}
