package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/spf13/pflag"

	"github.com/orderly-go/orderly/admin"
)

// adminOpts are the --admin and --pprof flags of every subcommand that
// runs a group: the admin server (package admin) in front of it.
type adminOpts struct {
	addr  string
	pprof bool

	fs *pflag.FlagSet // the flags, for the errors to say where a value came from
}

// flags defines --admin and --pprof on fs.
func (a *adminOpts) flags(fs *pflag.FlagSet) {
	a.fs = fs
	stringVar(fs, &a.addr, "admin", "", optional(hostPort),
		"serve the admin server on host:port (port 0: any free one): the status page at /, /metrics, /stats, /healthz, /readyz; empty: none")
	fs.BoolVar(&a.pprof, "pprof", false, "with --admin: serve net/http/pprof under /debug/pprof/ too")
}

// check refuses --pprof without --admin: pprof is served on the admin
// server, and there would be none.
func (a *adminOpts) check() error {
	if a.pprof && a.addr == "" {
		return usagef("%s needs --admin host:port (pprof is served on the admin server)", flagArg(a.fs, "pprof"))
	}
	return nil
}

// optional is a stringVar check that accepts "" and otherwise check's
// values.
func optional(check func(string) error) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		return check(s)
	}
}

// adminServer is a running admin server.
type adminServer struct {
	url  string // http://host:port/
	stop func() error
}

// start listens on a.addr and serves admin.Handler(g) there until
// stop, printing the URL on out; with no --admin it returns a server
// whose stop does nothing. The server outlives the group's Run (so that
// /readyz says 503 from the moment the group starts to stop until the
// report is printed), until the subcommand stops it.
func (a *adminOpts) start(g admin.Group, out io.Writer) (*adminServer, error) {
	if a.addr == "" {
		return &adminServer{stop: func() error { return nil }}, nil
	}
	at := flagArg(a.fs, "admin", a.addr)
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		if oe := (*net.OpError)(nil); errors.As(err, &oe) {
			err = oe.Err // at names the address already
		}
		return nil, fmt.Errorf("admin server: listen on %s: %w", at, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- admin.ServeListener(ctx, ln, g, admin.Options{Pprof: a.pprof}) }()
	s := &adminServer{url: "http://" + ln.Addr().String() + "/"}
	s.stop = func() error {
		cancel()
		if err := <-served; err != nil {
			return fmt.Errorf("admin server on %s: %w", at, err)
		}
		return nil
	}
	routes := "/metrics /stats /healthz /readyz"
	if a.pprof {
		routes += " /debug/pprof/"
	}
	fmt.Fprintf(out, "admin: %s (status page; %s)\n", s.url, routes)
	return s, nil
}
