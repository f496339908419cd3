package slots

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

func mustSpace(t *testing.T, n int) Space {
	t.Helper()
	s, err := NewSpace(n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHashIsTheAPIServers(t *testing.T) {
	for _, uid := range []types.UID{"", "a", uuid.NewUUID(), uuid.NewUUID()} {
		if got, want := fmt.Sprintf("%016x", Hash(uid)), sharding.HashField(string(uid)); got != want {
			t.Errorf("Hash(%q) = %s, the apiserver's is %s", uid, got, want)
		}
	}
}

// TestSelectorMatchesOf checks the selector against apimachinery's own matcher, the
// one the API server filters with: an object is selected exactly when its slot is one
// of the selector's.
func TestSelectorMatchesOf(t *testing.T) {
	for _, n := range []int{1, 3, 7, 16, 60, 1024} {
		s := mustSpace(t, n)
		chosen := []int{0, n / 2, n - 1}
		if n > 3 {
			chosen = append(chosen, 1) // adjacent to 0: one merged range
		}
		text, sel, err := s.Selector(chosen)
		if err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			foo := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{UID: uuid.NewUUID()}}
			got, err := sel.Matches(foo)
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Contains(chosen, s.Of(foo.UID)); got != want {
				t.Fatalf("%d slots, selector %s: UID %s (hash %016x, slot %d) matched %v, want %v",
					n, text, foo.UID, Hash(foo.UID), s.Of(foo.UID), got, want)
			}
		}
	}
}

func TestSelectorText(t *testing.T) {
	s := mustSpace(t, 4)
	for _, tc := range []struct {
		slots []int
		want  string
	}{
		{[]int{0}, "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000')"},
		{[]int{3, 0, 1, 1}, "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || " +
			"shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"},
		{[]int{0, 1, 2, 3}, "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"},
	} {
		got, _, err := s.Selector(tc.slots)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Selector(%v) =\n%s\nwant\n%s", tc.slots, got, tc.want)
		}
	}
	if _, _, err := s.Selector(nil); err == nil {
		t.Error("no slots gave a selector; the empty one selects everything")
	}
	if _, _, err := s.Selector([]int{4}); err == nil {
		t.Error("a slot outside the space gave a selector")
	}
}

func TestNewSpaceBounds(t *testing.T) {
	for _, n := range []int{0, -1, MaxSlots + 1} {
		if _, err := NewSpace(n); err == nil {
			t.Errorf("NewSpace(%d) succeeded", n)
		}
	}
}

func members(n int) []string {
	var m []string
	for i := range n {
		m = append(m, fmt.Sprintf("sample-controller-7d9f8b6c5-%c%c%c%c%c", 'a'+i, 'x', 'q'+i%3, 'b', 'k'+i))
	}
	return m
}

func TestAssignIsBalanced(t *testing.T) {
	for _, n := range []int{16, 60, 64, 256} {
		s := mustSpace(t, n)
		for m := 1; m <= 8; m++ {
			assigned := s.Assign(members(m))
			load := map[string]int{}
			for slot, owner := range assigned {
				if owner == "" {
					t.Fatalf("%d slots, %d members: slot %d has no owner", n, m, slot)
				}
				load[owner]++
			}
			floor, ceil := n/m, (n+m-1)/m
			for owner, l := range load {
				if l < floor || l > ceil {
					t.Errorf("%d slots, %d members: %s holds %d, want %d or %d", n, m, owner, l, floor, ceil)
				}
			}
			if len(load) != min(m, n) {
				t.Errorf("%d slots, %d members: %d members hold slots", n, m, len(load))
			}
		}
	}
}

func TestAssignIsDeterministic(t *testing.T) {
	s := mustSpace(t, 64)
	m := members(5)
	reversed := slices.Clone(m)
	slices.Reverse(reversed)
	if !slices.Equal(s.Assign(m), s.Assign(reversed)) {
		t.Error("the order the members are listed in changed the assignment")
	}
	if !slices.Equal(s.Assign(m), s.Assign(append(slices.Clone(m), m[0]))) {
		t.Error("a member listed twice changed the assignment")
	}
}

// TestAssignMovesFewSlots counts the slots that change owner when a member joins or
// leaves, against the least possible: the joiner's share, or the leaver's slots.
func TestAssignMovesFewSlots(t *testing.T) {
	const n = 64
	s := mustSpace(t, n)
	for m := 1; m <= 6; m++ {
		before := s.Assign(members(m))
		after := s.Assign(members(m + 1))
		moved := 0
		for slot := range n {
			if before[slot] != after[slot] {
				moved++
			}
		}
		least := len(SlotsOf(after, members(m + 1)[m]))
		t.Logf("%d -> %d members: %d of %d slots moved, %d at least", m, m+1, moved, n, least)
		// Bounded loads cost some moves beyond the least; more than twice as many would
		// make a scale-out a reshuffle.
		if moved > 2*least {
			t.Errorf("%d -> %d members: %d slots moved, want at most %d", m, m+1, moved, 2*least)
		}
	}
}

func TestAssignWithoutMembers(t *testing.T) {
	s := mustSpace(t, 8)
	if got := s.Assign(nil); strings.Join(got, "") != "" {
		t.Errorf("Assign(nil) = %q, want no owners", got)
	}
}
