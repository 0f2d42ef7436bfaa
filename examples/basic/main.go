// Command basic is the smallest Orderly service: it prints every message of
// a topic, many at a time, in order per key, committing behind its work.
//
//	go run ./cmd/orderly broker --topics events &   # or any Kafka cluster
//	go run ./examples/basic --brokers 127.0.0.1:9092 --topic events
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/orderly-go/orderly/group"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "basic:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("basic", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated host:port")
	topic := fs.String("topic", "events", "topic to consume")
	if err := fs.Parse(args); err != nil {
		return err
	}
	g, err := group.New(group.Config{
		Brokers: strings.Split(*brokers, ","),
		Topics:  []string{*topic},
		GroupID: "example-basic",
	}, group.Handler[*group.Message]{
		Do: func(ctx context.Context, batch []*group.Message) error {
			for _, m := range batch {
				fmt.Printf("%s/%d@%d %s=%s\n", m.Topic, m.Partition, m.Offset, m.Key, m.Value)
			}
			return nil // the whole batch is done; its offsets may be committed
		},
	})
	if err != nil {
		return err
	}
	return g.Run(ctx) // until Ctrl-C; then drains, commits and returns
}
