// Command typed shows a service that decodes messages into its own type,
// orders them by a field rather than the Kafka key, and writes each batch
// in one call (a database batch insert, here simulated):
//
//	go run ./cmd/orderly broker --topics orders &
//	go run ./examples/typed --brokers 127.0.0.1:9092 --topic orders
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/group"
)

// Order is what the topic carries, as JSON.
type Order struct {
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Cents    int64  `json:"cents"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "typed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("typed", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated host:port")
	topic := fs.String("topic", "orders", "topic to consume")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // best effort at exit
	g, err := group.New(group.Config{
		Brokers: strings.Split(*brokers, ","),
		Topics:  []string{*topic},
		GroupID: "example-typed",
		Size:    500,                   // rows per insert
		Num:     16,                    // inserts in flight
		Ticker:  50 * time.Millisecond, // a partial batch waits at most this long
		Logger:  log,
	}, group.Handler[Order]{
		// A message that does not decode is logged with its
		// topic/partition/offset, counted, and skipped past.
		New: func(m *group.Message) (Order, error) {
			var o Order
			err := json.Unmarshal(m.Value, &o)
			return o, err
		},
		// One lane per customer: a customer's orders are inserted in the
		// order they were produced, never two batches at once.
		Split: func(_ *group.Message, o Order) uint64 {
			h := fnv.New64a()
			h.Write([]byte(o.Customer))
			return h.Sum64()
		},
		Do: insert,
	})
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// insert stands for `INSERT INTO orders VALUES (...), (...), ...`: an
// error makes Orderly retry the whole batch with backoff, holding back
// only these customers' later orders.
func insert(ctx context.Context, batch []Order) error {
	select {
	case <-time.After(time.Millisecond + time.Duration(len(batch))*10*time.Microsecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	var cents int64
	for _, o := range batch {
		cents += o.Cents
	}
	fmt.Printf("inserted %d orders worth %d.%02d\n", len(batch), cents/100, cents%100)
	return nil
}
