package main

// A hunk replaces the lines [start, end) of a text with lines (start == end: an
// insertion before line start; no lines: a deletion).
type hunk struct {
	start, end int
	lines      []string
}

// diffLines returns the hunks that turn a into b, from a longest common subsequence of
// their lines. The texts here are single Kubernetes objects, at most a few hundred
// lines, so the quadratic table is small.
func diffLines(a, b []string) []hunk {
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
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

	var hunks []hunk
	var cur *hunk
	flush := func() {
		if cur != nil {
			hunks = append(hunks, *cur)
			cur = nil
		}
	}
	open := func(i int) {
		if cur == nil {
			cur = &hunk{start: i, end: i}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			flush()
			i++
			j++
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			open(i)
			cur.lines = append(cur.lines, b[j])
			j++
		default:
			open(i)
			i++
			cur.end = i
		}
	}
	flush()
	return hunks
}

// patch applies hunks, sorted by start and not overlapping, to a.
func patch(a []string, hunks []hunk) []string {
	var out []string
	i := 0
	for _, h := range hunks {
		out = append(out, a[i:h.start]...)
		out = append(out, h.lines...)
		i = h.end
	}
	return append(out, a[i:]...)
}
