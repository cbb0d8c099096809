package testutil

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of ending the test, so the timeout path can be checked.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f) // stop the caller as runtime.Goexit would
}

func catch(f *fakeT, fn func()) {
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
	}()
	fn()
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "three calls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}

	f := &fakeT{TB: t}
	catch(f, func() { Eventually(f, 120*time.Millisecond, "the impossible", func() bool { return false }) })
	if want := "timed out after 120ms waiting for the impossible"; f.failed != want {
		t.Fatalf("failure %q, want %q", f.failed, want)
	}
}

func TestEventuallyOK(t *testing.T) {
	n := 0
	EventuallyOK(t, time.Second, "two calls", func() error {
		if n++; n < 2 {
			return errors.New("not yet")
		}
		return nil
	})

	f := &fakeT{TB: t}
	i := 0
	catch(f, func() {
		EventuallyOK(f, 120*time.Millisecond, "Ready", func() error { i++; return fmt.Errorf("phase %d", i) })
	})
	if want := fmt.Sprintf("timed out after 120ms waiting for Ready: phase %d", i); f.failed != want {
		t.Fatalf("failure %q, want %q", f.failed, want)
	}
}

// A command's stdout and stderr are copied by two goroutines; `go test -race` checks that the
// test may read the buffer meanwhile.
func TestSyncBufferConcurrent(t *testing.T) {
	var b SyncBuffer
	cmd := exec.Command("sh", "-c", "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done")
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			_ = b.String()
			_ = b.Len()
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, want := range []string{"out5\n", "err5\n"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("buffer lacks %q: %q", want, b.String())
		}
	}
	if b.Len() != len(b.String()) {
		t.Fatalf("Len %d, String has %d bytes", b.Len(), len(b.String()))
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(`# HELP x_total X.
# TYPE x_total counter
x_total{a="1",b="tools/call"} 3
x_total{a="2",b="say \"hi\", {ok}"} 4
y 1.5
z{} 2 1700000000
# TYPE h histogram
h_bucket{le="1"} 2
h_bucket{le="+Inf"} 3
h_sum 4.5
h_count 3
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("x_total"); got != 7 {
		t.Fatalf("sum: %v", got)
	}
	if got := m.Sum("x_total", "b", "tools/call"); got != 3 {
		t.Fatalf("sum by label: %v", got)
	}
	if !m.Has("x_total", "b", `say "hi", {ok}`) || m.Has("x_total", "c", "") || m.Sum("y") != 1.5 || m.Sum("z") != 2 {
		t.Fatalf("samples: %+v", m)
	}
	if m.Sum("h_bucket", "le", "+Inf") != 3 || m.Sum("h_bucket", "le", "1") != 2 || m.Sum("h_sum") != 4.5 || m.Sum("h_count") != 3 {
		t.Fatalf("a histogram's series: %+v", m)
	}
	if _, err := ParseMetrics(`x{a="1} 2`); err == nil {
		t.Fatal("an unterminated label value must fail")
	}
}
