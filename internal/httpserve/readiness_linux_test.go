//go:build linux

package httpserve

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// startReadiness is a readiness closed when the test ends.
func startReadiness(t *testing.T) *Readiness {
	t.Helper()
	r, err := NewReadiness()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// loopbackPair is a connected pair of loopback TCP connections: the server's side and the
// client's (its peer), closed when the test ends.
func loopbackPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// readySignal is a ready that counts its calls and closes fired on the first.
type readySignal struct {
	calls atomic.Int32
	fired chan struct{}
}

func newReadySignal() *readySignal { return &readySignal{fired: make(chan struct{})} }

func (s *readySignal) ready() {
	if s.calls.Add(1) == 1 {
		close(s.fired)
	}
}

func (s *readySignal) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.fired:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: ready not called", what)
	}
}

// What the peer sends makes the connection ready, once; what it sent stays to be read.
func TestReadinessFiresWhenThePeerWrites(t *testing.T) {
	r := startReadiness(t)
	server, client := loopbackPair(t)
	s := newReadySignal()
	unwatch := r.add(server, s.ready)
	if unwatch == nil {
		t.Fatal("a TCP connection is not watched")
	}
	if r.Watching() != 1 {
		t.Fatalf("watching %d, want 1", r.Watching())
	}
	time.Sleep(50 * time.Millisecond)
	if s.calls.Load() != 0 {
		t.Fatal("ready before the peer sent anything")
	}
	if _, err := client.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	s.wait(t, "the peer wrote")
	if unwatch() {
		t.Error("unwatch after ready reports that ready was not called")
	}
	if r.Watching() != 0 {
		t.Errorf("watching %d once fired, want 0", r.Watching())
	}
	if _, err := client.Write([]byte(" more")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := s.calls.Load(); n != 1 {
		t.Errorf("ready called %d times, want once", n)
	}
	buf := make([]byte, 16)
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := server.Read(buf)
	if got := string(buf[:n]); err != nil || n == 0 || got != "next more"[:len(got)] {
		t.Fatalf("read %q, %v: what the peer sent must stay to be read", buf[:n], err)
	}
	// Fired, the connection is no longer registered: it can be watched again (a connection
	// given back and taken by its next stream).
	again := newReadySignal()
	if r.add(server, again.ready) == nil {
		t.Fatal("a connection that fired cannot be watched again")
	}
	_, _ = client.Write([]byte("!"))
	again.wait(t, "watched again")
}

// The peer's hanging up makes the connection ready.
func TestReadinessFiresWhenThePeerCloses(t *testing.T) {
	r := startReadiness(t)
	server, client := loopbackPair(t)
	s := newReadySignal()
	if r.add(server, s.ready) == nil {
		t.Fatal("not watched")
	}
	client.Close()
	s.wait(t, "the peer closed")
}

// Unwatched before anything came, ready is never called, and the connection can be watched
// again.
func TestReadinessUnwatchBeforeAnyEvent(t *testing.T) {
	r := startReadiness(t)
	server, client := loopbackPair(t)
	s := newReadySignal()
	unwatch := r.add(server, s.ready)
	if unwatch == nil {
		t.Fatal("not watched")
	}
	if !unwatch() {
		t.Fatal("unwatch before any event must report that ready was not called")
	}
	if unwatch() {
		t.Error("a second unwatch reports true")
	}
	if r.Watching() != 0 {
		t.Errorf("watching %d after unwatch", r.Watching())
	}
	_, _ = client.Write([]byte("x"))
	client.Close()
	time.Sleep(100 * time.Millisecond)
	if n := s.calls.Load(); n != 0 {
		t.Fatalf("ready called %d times after unwatch", n)
	}
	again := newReadySignal()
	if r.add(server, again.ready) == nil {
		t.Fatal("an unwatched connection cannot be watched again")
	}
	again.wait(t, "watched again") // what the peer sent is still there
}

// Connections that are not the OS's, and a nil readiness, are not watched: the caller reads.
func TestReadinessWatchesOnlyOSConnections(t *testing.T) {
	r := startReadiness(t)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if r.add(a, func() {}) != nil {
		t.Error("a net.Pipe is watched")
	}
	server, _ := loopbackPair(t)
	if (*Readiness)(nil).add(server, func() {}) != nil {
		t.Error("a nil readiness watches")
	}
}

// Closing the readiness ends its goroutine, which was parked in the netpoller (no thread
// held); what it still watched gets its ready (its reader then watches the connection
// itself), and it watches nothing more.
func TestReadinessCloseEndsItsGoroutine(t *testing.T) {
	watchers := func() (n, parked int) { // other gateways' of the process too
		for _, g := range testutil.Goroutines() {
			if strings.Contains(g, "httpserve.(*Readiness).watch(") {
				n++
				if strings.Contains(g, "[IO wait") {
					parked++
				}
			}
		}
		return n, parked
	}
	before, _ := watchers()
	r, err := NewReadiness()
	if err != nil {
		t.Fatal(err)
	}
	server, _ := loopbackPair(t)
	s := newReadySignal()
	unwatch := r.add(server, s.ready)
	if unwatch == nil {
		t.Fatal("not watched")
	}
	n, parked := watchers()
	for deadline := time.Now().Add(5 * time.Second); (n != before+1 || parked < n) && time.Now().Before(deadline); n, parked = watchers() {
		time.Sleep(10 * time.Millisecond)
	}
	if n != before+1 || parked < n {
		t.Fatalf("%d watcher goroutines, %d of them parked in the netpoller; want %d, all parked", n, parked, before+1)
	}
	r.Close()
	select {
	case <-r.done:
	default:
		t.Fatal("close returned before the watcher ended")
	}
	s.wait(t, "closed")
	if unwatch() {
		t.Error("unwatch after close reports that ready was not called")
	}
	if r.add(server, func() {}) != nil {
		t.Error("a closed readiness watches")
	}
	n, _ = watchers()
	for deadline := time.Now().Add(5 * time.Second); n != before && time.Now().Before(deadline); n, _ = watchers() {
		time.Sleep(10 * time.Millisecond)
	}
	if n != before {
		t.Fatalf("%d watcher goroutines after close, want %d", n, before)
	}
}

// Many connections: each fires once, when its own peer writes, and none before.
func TestReadinessManyConnections(t *testing.T) {
	r := startReadiness(t)
	const n = 200 // above readyBatch: the watcher takes several batches at once
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	clients := make([]net.Conn, n)
	signals := make([]*readySignal, n)
	for i := range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		clients[i], signals[i] = c, newReadySignal()
		if r.add(s, signals[i].ready) == nil {
			t.Fatal("not watched")
		}
	}
	// The odd ones first: the even ones must not fire.
	for i := 1; i < n; i += 2 {
		_, _ = clients[i].Write([]byte("x"))
	}
	for i := 1; i < n; i += 2 {
		signals[i].wait(t, "odd")
	}
	for i := 0; i < n; i += 2 {
		if signals[i].calls.Load() != 0 {
			t.Fatalf("connection %d fired though its peer sent nothing", i)
		}
	}
	if w := r.Watching(); w != n/2 {
		t.Fatalf("watching %d, want %d", w, n/2)
	}
	for i := 0; i < n; i += 2 {
		_, _ = clients[i].Write([]byte("x"))
	}
	for i := range n {
		_, _ = clients[i].Write([]byte("y")) // fired once: more is not another event
	}
	for i := 0; i < n; i += 2 {
		signals[i].wait(t, "even")
	}
	time.Sleep(50 * time.Millisecond)
	for i, s := range signals {
		if c := s.calls.Load(); c != 1 {
			t.Errorf("connection %d: ready called %d times, want once", i, c)
		}
	}
	if w := r.Watching(); w != 0 {
		t.Errorf("watching %d once all fired", w)
	}
}

// watchedTaken is a taken connection (the server's side of a loopback pair) watched by r, with
// what its owner is told and what goes home.
type watchedTaken struct {
	tc     *Taken
	client net.Conn
	gone   chan struct{}
	home   chan net.Conn
}

func newWatchedTaken(t *testing.T, r *Readiness) *watchedTaken {
	t.Helper()
	server, client := loopbackPair(t)
	w := &watchedTaken{client: client, gone: make(chan struct{}), home: make(chan net.Conn, 1)}
	w.tc = &Taken{conn: server, watcher: r, readerDone: make(chan struct{}),
		gone: func() { close(w.gone) }, home: func(c net.Conn) bool { w.home <- c; return true }}
	w.tc.Watch()
	if r.Watching() != 1 {
		t.Fatalf("watching %d, want 1", r.Watching())
	}
	return w
}

// A stream that ends whole with its reader never started sends its connection home as it is:
// no reader ran, and nothing was read from it.
func TestTakenConnEndsWholeWithoutItsReader(t *testing.T) {
	r := startReadiness(t)
	w := newWatchedTaken(t, r)
	before := takenReaders(t)
	if err := w.tc.Write([]byte("event")); err != nil {
		t.Fatal(err)
	}
	w.tc.Finish(true)
	select {
	case c := <-w.home:
		if c != w.tc.conn {
			t.Errorf("home got %T, want the connection as it is", c)
		}
	default:
		t.Fatal("the connection did not go home")
	}
	select {
	case <-w.tc.readerDone:
		t.Error("a reader ran")
	default:
	}
	if r.Watching() != 0 || takenReaders(t) > before {
		t.Errorf("after the stream: watching %d, %d readers more", r.Watching(), takenReaders(t)-before)
	}
	_ = w.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(w.client, buf, len("5\r\nevent\r\n0\r\n\r\n"))
	if got := string(buf[:n]); got != "5\r\nevent\r\n0\r\n\r\n" {
		t.Errorf("the client read %q", got)
	}
}

// The client's leaving starts the reader, which tells the owner.
func TestTakenConnClientGoneTellsTheOwner(t *testing.T) {
	r := startReadiness(t)
	w := newWatchedTaken(t, r)
	w.client.Close()
	select {
	case <-w.gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the owner was not told the client went")
	}
	<-w.tc.readerDone
	w.tc.Finish(true) // the client went: the connection closes
	select {
	case <-w.home:
		t.Error("the connection of a client that went went home")
	default:
	}
}

// A write that fails closes the connection, and the owner is told, as when the reader ran.
func TestTakenConnWriteFailureTellsTheOwner(t *testing.T) {
	r := startReadiness(t)
	w := newWatchedTaken(t, r)
	if err := w.tc.conn.(*net.TCPConn).CloseWrite(); err != nil { // the next write fails
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if r.Watching() != 1 {
		t.Fatal("the test means a write failing while the reader has not started")
	}
	if err := w.tc.Write([]byte("event")); err == nil {
		t.Fatal("the write did not fail")
	}
	select {
	case <-w.gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the owner was not told")
	}
	<-w.tc.readerDone
	if r.Watching() != 0 {
		t.Errorf("watching %d after the connection closed", r.Watching())
	}
}

// A stream that ends cut (not whole) unwatches its connection before closing it.
func TestTakenConnEndsCutUnwatched(t *testing.T) {
	r := startReadiness(t)
	w := newWatchedTaken(t, r)
	w.tc.Finish(false)
	if r.Watching() != 0 {
		t.Errorf("watching %d after the stream ended", r.Watching())
	}
	_ = w.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := w.client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the client read %v, want the connection's end", err)
	}
	select {
	case <-w.gone:
		t.Error("the owner was told of its own ending")
	default:
	}
}

// A reader the readiness starts as the stream is ending reads nothing (what the client sent
// is the server's, once the connection is home) and tells no one.
func TestTakenConnReaderStartedAsTheStreamEnds(t *testing.T) {
	r := startReadiness(t)
	w := newWatchedTaken(t, r)
	w.tc.mu.Lock()
	w.tc.stopping = true // as finish sets it, before it unwatches
	w.tc.mu.Unlock()
	if _, err := w.client.Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.tc.readerDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader started as the stream ended did not stop")
	}
	w.tc.mu.Lock()
	pending, idle := len(w.tc.pending), w.tc.stopWatching()
	w.tc.mu.Unlock()
	if pending != 0 || idle {
		t.Errorf("the reader kept %d bytes; unwatch reports %v", pending, idle)
	}
	select {
	case <-w.gone:
		t.Error("the owner was told")
	default:
	}
	_ = w.tc.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 8)
	if n, err := w.tc.conn.Read(buf); string(buf[:n]) != "GET" {
		t.Errorf("the server read %q, %v: what the client sent must stay", buf[:n], err)
	}
}

// takenReaders counts taken connections' readers (httpserve.Taken).
func takenReaders(t *testing.T) int { return testutil.CountStacks("httpserve.(*Taken).read(") }
