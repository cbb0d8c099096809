package policy

import (
	"slices"
	"testing"
)

// A server's environment holds each name once: the last entry given for it.
func TestDedupEnv(t *testing.T) {
	got := dedupEnv([]string{"A=1", "B=2", "A=3", "C=", "B=4"})
	if want := []string{"A=3", "B=4", "C="}; !slices.Equal(got, want) {
		t.Fatalf("dedupEnv = %q, want %q", got, want)
	}
}
