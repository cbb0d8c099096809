package spawn

import (
	"errors"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// spawner starts the stdio servers of the process and learns of their exits, on one goroutine
// locked to its OS thread while any server it started lives.
//
// A server needs a thread that outlives it: the parent-death signal (attr) fires when the
// thread that started the child ends, not the process, and the Go runtime ends a thread when a
// goroutine locked to it exits still locked. Waiting for the server with
// exec.Cmd.Wait would hold that thread and a goroutine per server, parked in waitid until
// the server exits. The spawner holds one of each for all of them: it starts servers as they
// are asked for, and on each SIGCHLD it looks (without reaping) which of its servers have
// exited, and reaps those with Wait, which then returns at once. Once the last has exited and
// no start is asked for, it returns, and its thread ends with it.
//
// Starts and reaps take turns: a start that hangs (an exec on a stuck filesystem) holds up the
// exits meanwhile. Past reaper.Grace the controller's reaper may take such a zombie first;
// Wait then says so (ECHILD), and the server's exit status is lost, not its exit.
type spawner struct {
	mu     sync.Mutex
	asks   chan ask // nil while no spawner goroutine runs
	asking int      // starts asked for and not yet taken: the goroutine stays for them
}

type ask struct {
	p       *Process
	started chan<- error
}

// spawns is the process's spawner: one for all servers, like the process's children.
var spawns spawner

// start starts the process (its exit closes p.done).
func start(p *Process) error { return spawns.start(p) }

func (s *spawner) start(p *Process) error {
	s.mu.Lock()
	if s.asks == nil {
		s.asks = make(chan ask)
		go s.run(s.asks)
	}
	asks := s.asks
	s.asking++
	s.mu.Unlock()
	started := make(chan error, 1)
	asks <- ask{p: p, started: started}
	return <-started
}

func (s *spawner) run(asks <-chan ask) {
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
	exits := make(chan os.Signal, 1)
	signal.Notify(exits, syscall.SIGCHLD)
	defer signal.Stop(exits)
	live := map[*Process]bool{}
	for {
		select {
		case a := <-asks:
			s.mu.Lock()
			s.asking--
			s.mu.Unlock()
			err := a.p.cmd.Start()
			if err == nil {
				live[a.p] = true
			}
			a.started <- err
		case <-exits: // signals of several exits may come as one: every server is looked at
			reapExited(live)
		}
		if len(live) == 0 && s.done() {
			return
		}
	}
}

// done ends the spawner's turn unless a start is being asked for.
func (s *spawner) done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.asking > 0 {
		return false
	}
	s.asks = nil
	return true
}

// reapExited reaps the servers in live that have exited, closing their done.
func reapExited(live map[*Process]bool) {
	for p := range live {
		if !exited(p.cmd.Process.Pid) {
			continue
		}
		p.err = p.cmd.Wait() // reaps, and says how it ended as exec.Cmd does
		close(p.done)
		delete(live, p)
	}
}

// exited reports whether child pid has exited, leaving it to be reaped (WNOWAIT). A child no
// longer there to look at (ECHILD) counts as exited: Wait then returns its error at once.
func exited(pid int) bool {
	for {
		var info unix.Siginfo // all zero unless a child is found
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err != nil || info.Signo != 0
	}
}
