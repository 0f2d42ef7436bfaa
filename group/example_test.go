package group_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/orderly-go/orderly/group"
)

type transfer struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

var seed = maphash.MakeSeed()

// A service that decodes JSON into its own type, keeps order per account
// (not per Kafka key), and writes batches of up to 500 in one call. Run
// returns when ctx ends, after draining and committing what finished.
func ExampleNew() {
	g, err := group.New(group.Config{
		Brokers: []string{"localhost:9092"},
		Topics:  []string{"transfers"},
		GroupID: "ledger",
		Size:    500,                   // at most 500 per Do call
		Num:     16,                    // 16 Do calls at a time
		Ticker:  20 * time.Millisecond, // a partial batch waits at most this long
		Retry:   group.Retry{Backoff: 50 * time.Millisecond},
	}, group.Handler[transfer]{
		New: func(m *group.Message) (transfer, error) {
			var t transfer
			err := json.Unmarshal(m.Value, &t) // an error skips the message, logged with its offset
			return t, err
		},
		Split: func(_ *group.Message, t transfer) uint64 {
			return maphash.String(seed, t.Account) // one account's transfers stay in order
		},
		Do: func(ctx context.Context, batch []transfer) error {
			return insertAll(ctx, batch) // an error retries the batch; its accounts wait
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := g.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func insertAll(context.Context, []transfer) error { return nil }

// New checks the whole Config and names the field at fault; callers can
// branch on ErrConfig.
func ExampleNew_badConfig() {
	_, err := group.New(group.Config{
		Brokers: []string{"localhost:9092"},
		Topics:  []string{"transfers"},
		GroupID: "ledger",
		Size:    -1,
	}, group.Handler[*group.Message]{
		Do: func(context.Context, []*group.Message) error { return nil },
	})
	fmt.Println(errors.Is(err, group.ErrConfig))
	fmt.Println(err)
	// Output:
	// true
	// group: invalid config: Size is -1: must be between 1 and 1048576 (0 means 1024)
}
