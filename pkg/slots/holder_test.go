package slots

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
)

// workLog records which member works on which slot, and any overlap.
type workLog struct {
	mu       sync.Mutex
	active   map[int]string
	overlaps []string
}

func (w *workLog) work(identity string) func(ctx context.Context, slot int) error {
	return func(ctx context.Context, slot int) error {
		w.mu.Lock()
		if other, ok := w.active[slot]; ok {
			w.overlaps = append(w.overlaps, fmt.Sprintf("slot %d: %s started while %s worked", slot, identity, other))
		}
		w.active[slot] = identity
		w.mu.Unlock()
		<-ctx.Done()
		// In-flight writes finish after the stop is asked for: the Lease must outlast them.
		time.Sleep(50 * time.Millisecond)
		w.mu.Lock()
		delete(w.active, slot)
		w.mu.Unlock()
		return nil
	}
}

// owners is each slot's worker, or "" for none.
func (w *workLog) owners(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, n)
	for slot, who := range w.active {
		out[slot] = who
	}
	return out
}

func TestHolderHandsSlotsOver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	const ns, group = "system", "sample-controller"
	space := mustSpace(t, 8)
	log := &workLog{active: map[int]string{}}
	timings := LeaseTimings{Duration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}

	start := func(identity string) (stop func()) {
		runCtx, cancel := context.WithCancel(ctx)
		m := NewMembership(client, ns, group, identity, space.Len(), 10*time.Second, clock.RealClock{})
		h := &Holder{
			Space: space, Membership: m, Client: client, Namespace: ns, Group: group, Identity: identity,
			Timings: timings, Work: log.work(identity),
			OnLost: func(slot int) { t.Errorf("%s lost slot %d", identity, slot) },
		}
		var wg sync.WaitGroup
		wg.Go(func() { m.Run(runCtx) })
		wg.Go(func() { h.Run(runCtx) })
		return func() {
			cancel()
			wg.Wait()
		}
	}
	waitOwners := func(what string, want func([]string) bool) {
		t.Helper()
		began := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			return want(log.owners(space.Len())), nil
		})
		if err != nil {
			t.Fatalf("%s: owners %q", what, log.owners(space.Len()))
		}
		t.Logf("%s after %v", what, time.Since(began).Round(time.Millisecond))
	}
	all := func(who string) func([]string) bool {
		return func(owners []string) bool {
			return !slices.ContainsFunc(owners, func(o string) bool { return o != who })
		}
	}

	stopA := start("a")
	waitOwners("a works on every slot", all("a"))

	stopB := start("b")
	waitOwners("a and b share the slots as assigned", func(owners []string) bool {
		return slices.Equal(owners, space.Assign([]string{"a", "b"}))
	})

	stopB()
	waitOwners("a works on every slot again once b left", all("a"))
	stopA()
	waitOwners("nobody works once both stopped", all(""))

	if len(log.overlaps) > 0 {
		t.Errorf("two members worked on one slot at once:\n%s", log.overlaps)
	}
}
