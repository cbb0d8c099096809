package conn

import (
	"sync/atomic"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// signals are what the supervisor's loop (serve) is told from other goroutines: a re-list is
// asked for, the session was seen gone, and which lists the server announced changed.
type signals struct {
	relist    chan struct{} // the server's list_changed, or a caller's request
	dead      chan struct{} // a request observed the session gone
	announced atomic.Uint32 // Lists the server announced changed since the last re-list began
}

func newSignals() *signals {
	return &signals{relist: make(chan struct{}, 1), dead: make(chan struct{}, 1)}
}

// Lists is a set of the lists a server announces changes of with list_changed.
type Lists uint32

const (
	ToolList Lists = 1 << iota
	PromptList
	ResourceList
)

// announce notes the server's list_changed of a list and asks for a re-list.
func (s *signals) announce(l Lists) {
	s.announced.Or(uint32(l))
	s.requestRelist()
}

// takeAnnounced is what the server announced since the last call.
func (s *signals) takeAnnounced() Lists { return Lists(s.announced.Swap(0)) }

// requestRelist asks the supervisor to list again.
func (s *signals) requestRelist() {
	select {
	case s.relist <- struct{}{}:
	default:
	}
}

// signalDead tells the supervisor the session is gone.
func (s *signals) signalDead() {
	select {
	case s.dead <- struct{}{}:
	default:
	}
}

// clearDead drops a death signal left by a request on the previous session.
func (s *signals) clearDead() {
	select {
	case <-s.dead:
	default:
	}
}

// counters are what a connection counts: its metric series (phase changes, connects,
// reconnects, waits), and, for tests, the work it does by itself.
type counters struct {
	metrics *metrics.Server
	relists atomic.Uint64 // re-lists done (list_changed coalescing)
	lists   atomic.Uint64 // listings decoded (a re-list whose pages did not change decodes nothing)
	probes  atomic.Uint64 // health probes sent
}
