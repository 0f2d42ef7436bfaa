package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// shutdownTimeout bounds how long Serve waits for requests in progress
// once its ctx ends.
const shutdownTimeout = 5 * time.Second

// Serve listens on addr (host:port; port 0: any free port) and serves
// Handler(g, opts) until ctx ends, then shuts down gracefully: requests
// in progress get up to 5s, then are cut off. It returns nil after a shutdown by ctx, or
// the error that stopped it (the address in use, say).
func Serve(ctx context.Context, addr string, g Group, opts Options) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, g, opts)
}

// ServeListener is Serve on a listener the caller made (to learn the port
// it got before serving); it closes ln.
func ServeListener(ctx context.Context, ln net.Listener, g Group, opts Options) error {
	srv := &http.Server{
		Handler:           Handler(g, opts),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(err, srv.Close()) // requests still running: cut them off
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("admin: shut down the server on %s: %w", ln.Addr(), err)
	}
	return nil
}
