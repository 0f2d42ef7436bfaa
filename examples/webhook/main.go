// Command webhook is a small HTTP service fed by `orderly consume --http`:
// order events (created, paid, shipped, delivered), keyed by order, that
// the service must see in order per order. It answers a batch with the
// per-item outcomes consume understands, rejecting any event that does not
// follow from its order's state, and fails a share of requests with 500 as
// a flaky database would (consume retries them).
//
//	go run ./examples/webhook            # all in one: embedded broker, events, the service, orderly consume
//	go run ./examples/webhook --serve 127.0.0.1:8080   # the service alone, for your own broker and consume
//
// All in one, it starts an embedded Kafka-protocol broker, produces the
// events, serves the webhook on a free port, builds the orderly binary
// (`go build`, cached after the first time) or takes --orderly, runs
//
//	orderly consume --brokers B --topic orders --group webhook --http http://ADDR/events --size 20 --num 8
//
// until the service has every event, stops it with SIGTERM (it drains and
// commits), and prints what the service saw: every order complete, no
// event out of order.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "webhook: %v\nsee 'webhook --help'\n", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

type options struct {
	serve   string
	orders  int
	fail    float64
	orderly string
	size    int
	num     int
}

func parseFlags(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.StringVar(&o.serve, "serve", "", "only serve the webhook on this host:port (POST /events), until Ctrl-C")
	fs.IntVar(&o.orders, "orders", 500, "orders to produce events for (4 events each)")
	fs.Float64Var(&o.fail, "fail", 0.05, "share of requests the service answers 500")
	fs.StringVar(&o.orderly, "orderly", "", "path of the orderly binary; empty: go build ./cmd/orderly into a temporary directory")
	fs.IntVar(&o.size, "size", 20, "records per request (orderly consume --size)")
	fs.IntVar(&o.num, "num", 8, "requests at once (orderly consume --num)")
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "Usage: webhook [flags]\n\nFlags:\n")
		fs.PrintDefaults()
		return nil, err
	case err != nil:
		return nil, usageError{err}
	case fs.NArg() > 0:
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	case o.orders < 1 || o.size < 2 || o.num < 1:
		return nil, usageError{errors.New("-orders and -num must be positive, -size at least 2 (the service takes JSON batches)")}
	case o.fail < 0 || o.fail >= 1:
		return nil, usageError{fmt.Errorf("invalid value %v for -fail: must be in [0, 1)", o.fail)}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	svc := newService(o.fail)
	if o.serve != "" {
		return serve(ctx, o.serve, svc, stdout)
	}
	b, err := broker.Start(broker.Config{Topics: []string{"orders"}, Partitions: 4})
	if err != nil {
		return err
	}
	defer b.Close()
	n := 4 * o.orders
	if err := loadgen.Produce(ctx, b.Addrs(), "orders", n, events(o.orders)); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			http.NotFound(w, r)
			return
		}
		svc.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Shutdown
	defer srv.Shutdown(context.Background())

	bin := o.orderly
	if bin == "" {
		dir, err := os.MkdirTemp("", "webhook-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bin, err = buildOrderly(ctx, dir, stdout); err != nil {
			return err
		}
	}
	cargs := []string{"consume", "--brokers", b.Addrs()[0], "--topic", "orders", "--group", "webhook",
		"--http", "http://" + ln.Addr().String() + "/events", "--size", strconv.Itoa(o.size), "--num", strconv.Itoa(o.num),
		"--ticker", "20ms", "--backoff", "20ms", "--max-backoff", "500ms", "--progress-every", "1s", "--log-level", "warn"}
	fmt.Fprintf(stdout, "webhook: %d events of %d orders on the embedded broker %s; service on http://%s/events\n",
		n, o.orders, b.Addrs()[0], ln.Addr())
	fmt.Fprintf(stdout, "running: orderly %s\n", joinArgs(cargs))
	cmd := exec.Command(bin, cargs...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for svc.report().events < n {
		select {
		case err := <-waited:
			return fmt.Errorf("orderly consume ended before the service had every event: %w", err)
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may be gone
			<-waited
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := <-waited; err != nil {
		return fmt.Errorf("orderly consume after SIGTERM: %w", err)
	}
	r := svc.report()
	fmt.Fprintf(stdout, "service: %d requests (%d answered 500, retried by consume); %d events applied, %d redeliveries acknowledged\n",
		r.requests, r.failed, r.events, r.dupes)
	fmt.Fprintf(stdout, "service: orders complete %d of %d; events out of order %d\n", r.complete, o.orders, r.bad)
	if r.complete != o.orders || r.bad != 0 {
		return fmt.Errorf("%d of %d orders complete, %d events out of order", r.complete, o.orders, r.bad)
	}
	return nil
}

// events draws each order's four events in order, the orders interleaved
// at random, keyed by order.
func events(orders int) loadgen.Gen {
	r := rand.New(rand.NewPCG(7, 11))
	next := make([]int, orders)
	open := make([]int, orders)
	for i := range open {
		open[i] = i
	}
	seq := make([][]byte, 0, 4*orders)
	for len(open) > 0 {
		j := r.IntN(len(open))
		o := open[j]
		v, _ := json.Marshal(event{Order: fmt.Sprintf("order-%04d", o), Status: states[next[o]]})
		seq = append(seq, v)
		if next[o]++; next[o] == len(states) {
			open[j] = open[len(open)-1]
			open = open[:len(open)-1]
		}
	}
	return func(i int) loadgen.Record {
		var ev event
		json.Unmarshal(seq[i], &ev) //nolint:errcheck // just marshalled
		return loadgen.Record{Key: []byte(ev.Order), Value: seq[i]}
	}
}

// buildOrderly builds cmd/orderly into dir.
func buildOrderly(ctx context.Context, dir string, stdout io.Writer) (string, error) {
	bin := filepath.Join(dir, "orderly")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	fmt.Fprintln(stdout, "webhook: building orderly (go build, cached after the first time)")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/orderly-go/orderly/cmd/orderly").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build orderly: %w\n%s", err, out)
	}
	return bin, nil
}

// serve runs the webhook alone on addr until ctx ends.
func serve(ctx context.Context, addr string, svc *service, stdout io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-serve %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/events", svc)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "webhook: serving http://%s/events; try\n  orderly consume --brokers HOST:9092 --topic orders --group webhook --http http://%s/events --size 20\n", ln.Addr(), ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background()) //nolint:errcheck // best effort
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	r := svc.report()
	fmt.Fprintf(stdout, "service: %d requests, %d events applied, orders complete %d of %d, events out of order %d\n",
		r.requests, r.events, r.complete, r.orders, r.bad)
	return nil
}

func joinArgs(args []string) string {
	s := ""
	for i, a := range args {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}
