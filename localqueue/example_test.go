package localqueue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/orderly-go/orderly/localqueue"
)

// A memory-only queue used as an at-least-once work queue: a message that
// is not finished comes back, with Attempts counting its deliveries.
func Example() {
	q, err := localqueue.Open(localqueue.Options{Name: "jobs", MemQueueSize: 100})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	if _, err := q.Put([]byte("resize photo 42")); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	m, err := q.Get(ctx) // in flight until Finish, Requeue or MsgTimeout
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("got %q, attempt %d\n", m.Body, m.Attempts)

	// The work failed: hand it back now (a delay > 0 defers it).
	if err := q.Requeue(m.ID, 0); err != nil {
		log.Fatal(err)
	}
	m, err = q.Get(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("got %q, attempt %d\n", m.Body, m.Attempts)
	if err := q.Finish(m.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("depth after Finish:", q.Depth())
	// Output:
	// got "resize photo 42", attempt 1
	// got "resize photo 42", attempt 2
	// depth after Finish: 0
}

// With a DataPath, what is waiting survives a restart: here a deferred
// message and one that was in flight when the queue was closed.
func Example_restart() {
	dir, err := os.MkdirTemp("", "localqueue-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	opts := localqueue.Options{Name: "mail", DataPath: dir}

	q, err := localqueue.Open(opts)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.PutDeferred([]byte("reminder"), 50*time.Millisecond); err != nil {
		log.Fatal(err)
	}
	if _, err := q.Put([]byte("welcome")); err != nil {
		log.Fatal(err)
	}
	m, err := q.Get(context.Background()) // "welcome", in flight, never finished
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("before restart: %q in flight\n", m.Body)
	if err := q.Close(); err != nil {
		log.Fatal(err)
	}

	q, err = localqueue.Open(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	var got []string // sorted below: the reminder may be due by now, or not
	for range 2 {
		m, err := q.Get(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		got = append(got, fmt.Sprintf("after restart: %q, attempt %d", m.Body, m.Attempts))
		if err := q.Finish(m.ID); err != nil {
			log.Fatal(err)
		}
	}
	slices.Sort(got)
	fmt.Println(strings.Join(got, "\n"))
	// Output:
	// before restart: "welcome" in flight
	// after restart: "reminder", attempt 1
	// after restart: "welcome", attempt 2
}
