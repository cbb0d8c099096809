//go:build !linux

package spawn

// start starts the process and waits for it on a goroutine of its own, which closes p.done.
// Outside Linux there is no parent-death signal to tie a server to the thread that started it.
func start(p *Process) error {
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}
