package group

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/IBM/sarama"
	"golang.org/x/net/proxy"
)

// startDialer dials the group's brokers. While Run connects (sarama's
// NewClient and the checks after it take no ctx: a broker that accepts
// connections and never answers holds each try for Net.ReadTimeout, and
// Run for minutes), an abort closes the connections it made and refuses
// new ones, so that Run returns soon after its ctx ends. Once the group is
// connected it dials as sarama would, and an abort does nothing.
type startDialer struct {
	next proxy.Dialer // Net.Proxy.Dialer when set, else sarama's own dialer

	mu       sync.Mutex
	starting bool
	aborted  bool
	conns    []net.Conn // made while starting
	cancel   context.CancelFunc
	ctx      context.Context // ends with an abort: dials under way give up
}

// errStartAborted: Run's ctx ended while it was connecting.
var errStartAborted = errors.New("group: stopped while connecting")

// useStartDialer puts a startDialer in sc's place for dialing brokers.
func useStartDialer(sc *sarama.Config) *startDialer {
	next := sc.Net.Proxy.Dialer
	if !sc.Net.Proxy.Enable || next == nil {
		next = &net.Dialer{Timeout: sc.Net.DialTimeout, KeepAlive: sc.Net.KeepAlive, LocalAddr: sc.Net.LocalAddr}
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &startDialer{next: next, starting: true, ctx: ctx, cancel: cancel}
	sc.Net.Proxy.Enable, sc.Net.Proxy.Dialer = true, d
	return d
}

// Dial implements proxy.Dialer.
func (d *startDialer) Dial(network, addr string) (net.Conn, error) {
	d.mu.Lock()
	starting, aborted := d.starting, d.aborted
	d.mu.Unlock()
	if aborted {
		return nil, errStartAborted
	}
	if !starting {
		return d.next.Dial(network, addr)
	}
	var c net.Conn
	var err error
	if cd, ok := d.next.(proxy.ContextDialer); ok {
		c, err = cd.DialContext(d.ctx, network, addr)
	} else {
		c, err = d.next.Dial(network, addr)
	}
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.aborted:
		c.Close()
		return nil, errStartAborted
	case d.starting:
		d.conns = append(d.conns, c)
	}
	return c, nil
}

// abort closes the connections made while starting and refuses new ones;
// it does nothing once started has been called.
func (d *startDialer) abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.starting {
		return
	}
	d.aborted = true
	d.cancel()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// started ends the start: from now on it dials as sarama would.
func (d *startDialer) started() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.starting = false
	d.conns = nil
	d.cancel()
}
