package httpcarrier

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"
)

// MaxIdlePerHost bounds the idle TCP connections a pool keeps to one host, and those of the
// net/http Transport beside it: both are meant to be shared by every client of the host, so
// many requests to it may run at once (net/http's default keeps 2 and closes the rest after
// each).
const MaxIdlePerHost = 64

// BufferSize is the read buffer of each TCP connection a pool holds, and the read and write
// buffer the net/http Transport beside it is given (net/http's default is 4 KiB each).
// Most of those connections carry an MCP connection's event stream, which waits almost all
// the time for a small event, with the SDK's own 4 KiB reader above it: at 3,000 connections
// the transport's buffers were 20 MiB of the live heap. A read or write larger than the buffer
// goes past it straight to the socket, so a large result costs no more copies, and a small
// request or event fits.
const BufferSize = 1 << 10

// Pool is the TCP connections carriers keep open between requests, by host: at most
// MaxIdlePerHost each, for at most idleTimeout each. Its owner closes it (Close) once no
// carrier uses it.
type Pool struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu     sync.Mutex
	hosts  map[string][]*tcpConn // oldest first
	timer  *time.Timer           // prunes connections idle too long; nil while none are kept
	closed bool
}

// idleTimeout is how long a kept connection may stay idle, as net/http's DefaultTransport.
const idleTimeout = 90 * time.Second

// NewPool is a pool whose connections are dialed by dial (nil: a plain dialer, with the
// timeouts of net/http's DefaultTransport).
func NewPool(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Pool {
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	return &Pool{dial: dial, hosts: map[string][]*tcpConn{}}
}

// get is a kept connection to host still open, or a new one (always a new one when fresh).
// A kept connection whose last answer's end is still to come is passed over and kept.
func (p *Pool) get(ctx context.Context, host string, fresh bool) (*tcpConn, error) {
	var later []*tcpConn
	defer func() {
		for _, c := range later {
			p.put(c)
		}
	}()
	for !fresh {
		c := p.take(host)
		if c == nil {
			break
		}
		switch ready, wait := c.settle(); {
		case ready:
			c.reused = true
			return c, nil
		case wait:
			later = append(later, c)
		default:
			c.close()
		}
	}
	nc, err := p.dial(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	return &tcpConn{Conn: nc, br: bufio.NewReaderSize(nc, BufferSize), host: host}, nil
}

// Idle is how many connections to host the pool keeps.
func (p *Pool) Idle(host string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.hosts[host])
}

// take is the connection to host put last, if any.
func (p *Pool) take(host string) *tcpConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.hosts[host]
	if len(kept) == 0 {
		return nil
	}
	c := kept[len(kept)-1]
	kept[len(kept)-1] = nil
	if len(kept) == 1 {
		delete(p.hosts, host)
	} else {
		p.hosts[host] = kept[:len(kept)-1]
	}
	return c
}

// put keeps c for the next request to its host, or closes it when the host has
// MaxIdlePerHost kept already or the pool is closed.
func (p *Pool) put(c *tcpConn) {
	c.reused, c.idle = false, time.Now()
	host := c.host
	p.mu.Lock()
	if p.closed || len(p.hosts[host]) >= MaxIdlePerHost {
		p.mu.Unlock()
		c.close()
		return
	}
	p.hosts[host] = append(p.hosts[host], c)
	if p.timer == nil {
		p.timer = time.AfterFunc(idleTimeout, p.prune)
	}
	p.mu.Unlock()
}

// prune closes the connections idle for idleTimeout or longer, and arms itself again while
// any are kept.
func (p *Pool) prune() {
	var stale []*tcpConn
	now := time.Now()
	p.mu.Lock()
	next := time.Duration(0)
	for host, kept := range p.hosts {
		i := 0
		for ; i < len(kept) && now.Sub(kept[i].idle) >= idleTimeout; i++ {
			stale = append(stale, kept[i])
		}
		if kept = kept[i:]; len(kept) == 0 {
			delete(p.hosts, host)
			continue
		}
		p.hosts[host] = kept
		if left := idleTimeout - now.Sub(kept[0].idle); next == 0 || left < next {
			next = left
		}
	}
	p.timer = nil
	if next > 0 && !p.closed {
		p.timer = time.AfterFunc(next, p.prune)
	}
	p.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
}

// Close closes every kept connection, and any put after.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	hosts := p.hosts
	p.hosts = map[string][]*tcpConn{}
	p.mu.Unlock()
	for _, kept := range hosts {
		for _, c := range kept {
			c.close()
		}
	}
}
