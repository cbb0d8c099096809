package main

import (
	"fmt"
	"strings"
)

// diffContext is how many unchanged lines a hunk shows around a change.
const diffContext = 3

// maxDiffCells bounds the table lineDiff fills; past it the files are shown as replaced
// whole (config files are a few hundred lines).
const maxDiffCells = 4 << 20

// diffOp is one line of a diff: ' ' kept, '-' removed, '+' added.
type diffOp struct {
	kind byte
	text string
}

// lineDiff is a unified diff of two versions of the file at path ("" when they are equal).
func lineDiff(path string, before, after []byte) string {
	ops := diffLines(splitLines(string(before)), splitLines(string(after)))
	var b strings.Builder
	for _, h := range hunks(ops) {
		if b.Len() == 0 {
			fmt.Fprintf(&b, "--- %s\n+++ %s\n", path, path)
		}
		b.WriteString(h)
	}
	return b.String()
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
}

// diffLines is a shortest edit from a to b, by the longest common subsequence of their lines.
func diffLines(a, b []string) []diffOp {
	if len(a)*len(b) > maxDiffCells {
		var ops []diffOp
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	// lcs[i][j] is the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, diffOp{'-', a[i]}) // a removal before the addition replacing it
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	return ops
}

// hunks groups the changes with diffContext lines around them, each under its @@ header.
func hunks(ops []diffOp) []string {
	var out []string
	for start := 0; start < len(ops); {
		first := start
		for first < len(ops) && ops[first].kind == ' ' {
			first++
		}
		if first == len(ops) {
			break
		}
		// The hunk runs until more than twice the context of unchanged lines follows a change.
		end, same := first, 0
		for k := first; k < len(ops) && same <= 2*diffContext; k++ {
			if ops[k].kind == ' ' {
				same++
			} else {
				same, end = 0, k+1
			}
		}
		lo, hi := max(start, first-diffContext), min(len(ops), end+diffContext)
		out = append(out, hunk(ops, lo, hi))
		start = hi
	}
	return out
}

// hunk renders ops[lo:hi] with its header of line numbers (1-based) in either version.
func hunk(ops []diffOp, lo, hi int) string {
	oldLine, newLine := 1, 1
	for _, op := range ops[:lo] {
		if op.kind != '+' {
			oldLine++
		}
		if op.kind != '-' {
			newLine++
		}
	}
	var body strings.Builder
	oldN, newN := 0, 0
	for _, op := range ops[lo:hi] {
		if op.kind != '+' {
			oldN++
		}
		if op.kind != '-' {
			newN++
		}
		body.WriteByte(op.kind)
		body.WriteString(op.text)
		if !strings.HasSuffix(op.text, "\n") {
			body.WriteString("\n")
		}
	}
	return fmt.Sprintf("@@ -%s +%s @@\n%s", hunkRange(oldLine, oldN), hunkRange(newLine, newN), body.String())
}

// hunkRange is "start,count" as unified diffs write it (an empty range starts a line before).
func hunkRange(start, n int) string {
	if n == 0 {
		start--
	}
	return fmt.Sprintf("%d,%d", start, n)
}
