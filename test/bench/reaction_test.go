package main

import (
	"errors"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		p      float64
		want   float64
	}{
		{"no values", nil, 50, 0},
		{"one value", []float64{7}, 99, 7},
		{"median of an odd count", []float64{5, 1, 3}, 50, 3},
		{"median of an even count is the lower middle", []float64{4, 1, 3, 2}, 50, 2},
		{"p99 of 100 values is the 99th", seq(100), 99, 99},
		{"p99 of 1000 values is the 990th", seq(1000), 99, 990},
		{"max", []float64{2, 9, 4}, 100, 9},
		{"a tiny percentile is the minimum", []float64{2, 9, 4}, 0.001, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.values, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.values, tt.p, got, tt.want)
			}
		})
	}
}

// seq returns 1..n.
func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func TestPercentileLeavesInputAlone(t *testing.T) {
	values := []float64{3, 1, 2}
	percentile(values, 50)
	if values[0] != 3 || values[1] != 1 || values[2] != 2 {
		t.Errorf("percentile reordered its input: %v", values)
	}
}

func TestLatencyTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	recorded := func(tr *latencyTracker, sent int) reactionResult {
		r := reactionResult{Sent: sent}
		tr.record(&r)
		return r
	}

	t.Run("an exact value delivers its change", func(t *testing.T) {
		tr := newLatencyTracker()
		c := tr.sent("a", 2, ms(0))
		tr.answered(c, ms(10), nil)
		tr.observe("a", 2, ms(30))
		got := recorded(tr, 1)
		if got.Delivered != 1 || got.MaxMs != 30 || got.AcceptedP50Ms != 20 || got.Exact != 1 || tr.remaining() != 0 {
			t.Errorf("got %+v, remaining %d", got, tr.remaining())
		}
	})
	t.Run("an event before the response counts zero from the response", func(t *testing.T) {
		tr := newLatencyTracker()
		c := tr.sent("a", 2, ms(0))
		tr.observe("a", 2, ms(5))
		tr.answered(c, ms(8), nil)
		if got := recorded(tr, 1); got.MaxMs != 5 || got.AcceptedP50Ms != 0 {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("an older value delivers nothing", func(t *testing.T) {
		tr := newLatencyTracker()
		tr.sent("a", 3, ms(0))
		tr.observe("a", 2, ms(10))
		if got := recorded(tr, 1); got.Delivered != 0 || tr.remaining() != 1 {
			t.Errorf("got %+v, remaining %d", got, tr.remaining())
		}
	})
	t.Run("a newer value delivers the skipped change too, not exactly", func(t *testing.T) {
		tr := newLatencyTracker()
		tr.sent("a", 2, ms(0))
		tr.sent("a", 3, ms(5))
		tr.observe("a", 3, ms(20))
		got := recorded(tr, 2)
		if got.Delivered != 2 || got.P50Ms != 15 || got.MaxMs != 20 || got.Exact != 1 {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("Deployments are told apart", func(t *testing.T) {
		tr := newLatencyTracker()
		tr.sent("a", 2, ms(0))
		tr.sent("b", 2, ms(0))
		tr.observe("b", 2, ms(1))
		if tr.remaining() != 1 {
			t.Errorf("remaining %d, want 1", tr.remaining())
		}
	})
	t.Run("a failed change is not waited for", func(t *testing.T) {
		tr := newLatencyTracker()
		c := tr.sent("a", 2, ms(0))
		tr.sent("a", 3, ms(1))
		if n := tr.answered(c, ms(0), errors.New("conflict")); n != 1 || tr.remaining() != 1 {
			t.Fatalf("failed %d, remaining %d, want 1 and 1", n, tr.remaining())
		}
		tr.observe("a", 3, ms(4))
		got := recorded(tr, 2)
		if got.Failed != 1 || got.Delivered != 1 || got.MaxMs != 3 || got.Exact != 1 || tr.remaining() != 0 {
			t.Errorf("got %+v, remaining %d", got, tr.remaining())
		}
	})
	t.Run("a repeated event delivers nothing twice", func(t *testing.T) {
		tr := newLatencyTracker()
		tr.sent("a", 2, ms(0))
		tr.observe("a", 2, ms(1))
		tr.observe("a", 2, ms(9))
		if got := recorded(tr, 1); got.Delivered != 1 || got.MaxMs != 1 {
			t.Errorf("got %+v, want one latency of 1 ms", got)
		}
	})
	t.Run("the rate runs from the first change sent to the last, failed ones too", func(t *testing.T) {
		tr := newLatencyTracker()
		tr.sent("b", 2, ms(500))
		c := tr.sent("a", 2, ms(0))
		tr.answered(c, ms(0), errors.New("conflict"))
		if got := recorded(tr, 2); got.AchievedRate != 2 {
			t.Errorf("achieved rate %v, want 2 per second", got.AchievedRate)
		}
	})
}
