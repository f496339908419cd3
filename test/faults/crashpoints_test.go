//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/test/apiproxy"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// crashRun is one run of the crash-point scenario in its own namespace, with a
// controller that is killed right after its k-th write of a Foo or Deployment, if k is
// above 0: the write is committed, and the controller never sees the answer.
type crashRun struct {
	ns string
	c  *proxiedController
	k  int

	mu       sync.Mutex
	writes   int            // Foo and Deployment writes before the kill
	killedAt time.Time      // zero until the kill
	killed   apiproxy.Write // the k-th write
	restarts int
	recovery time.Duration // from the kill until the step under way had converged
}

func newCrashRun(t *testing.T, k int) *crashRun {
	r := &crashRun{ns: env.NewNamespace(t), k: k}
	r.c = startProxied(t, r.ns)
	if k > 0 {
		r.c.proxy.AfterWrite(r.afterWrite)
	}
	return r
}

func (r *crashRun) afterWrite(w apiproxy.Write) {
	if !isObjectWrite(w) {
		return
	}
	r.mu.Lock()
	r.writes++
	if r.writes != r.k {
		r.mu.Unlock()
		return
	}
	r.killedAt, r.killed = time.Now(), w
	r.mu.Unlock()
	r.c.proxy.AfterWrite(nil)
	// The answer waits for this hook: the controller dies without it.
	_ = r.c.process().Kill()
}

// converge waits until the Foos named in foos have converged, restarting the
// controller once it has been killed, as a Deployment's ReplicaSet would.
func (r *crashRun) converge(t *testing.T, what string, foos ...string) {
	t.Helper()
	framework.Eventually(t, timeout, what, func(ctx context.Context) (bool, string) {
		r.mu.Lock()
		restart := !r.killedAt.IsZero() && r.restarts == 0
		r.mu.Unlock()
		if restart {
			r.c.start(t)
			r.mu.Lock()
			r.restarts++
			r.mu.Unlock()
		}
		broken, err := violations(ctx, r.ns, foos)
		if err != nil {
			return false, err.Error()
		}
		if len(broken) > 0 {
			return false, strings.Join(broken, "; ")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.restarts > 0 && r.recovery == 0 {
			r.recovery = time.Since(r.killedAt)
		}
		// A kill that has just happened is not converged: the controller restarts.
		return r.killedAt.IsZero() || r.restarts > 0, "the controller was killed"
	})
}

// scenario creates a Foo, scales it, renames its Deployment and deletes it, waiting for
// each step to converge, and returns the end state before the delete, which must not
// depend on where the controller was killed. After the delete, the invariants say that
// nothing is left.
func (r *crashRun) scenario(t *testing.T) endState {
	t.Helper()
	createFoo(t, r.ns, "web", "web-a", 1)
	r.converge(t, "the new Foo to converge", "web")
	patchFooSpec(t, r.ns, "web", `{"replicas":3}`)
	r.converge(t, "the scaled Foo to converge", "web")
	patchFooSpec(t, r.ns, "web", `{"deploymentName":"web-b"}`)
	r.converge(t, "the renamed Foo to converge", "web")
	state, err := readEndState(t.Context(), r.ns)
	if err != nil {
		t.Fatal(err)
	}
	// In the foreground, the Foo stays, marked for deletion, until the garbage
	// collector has deleted its Deployment: the controller must not make it another.
	err = env.Sample.SamplecontrollerV1alpha1().Foos(r.ns).Delete(t.Context(), "web",
		metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	if err != nil {
		t.Fatalf("deleting Foo %s/web: %v", r.ns, err)
	}
	r.converge(t, "the deleted Foo and its Deployment to be gone")
	return state
}

// TestCrashPoints is Sieve's intermediate-state testing: a learning run of the
// scenario records every write the controller makes to Foos and Deployments; then, for
// each k, a fresh controller is killed right after its k-th write and restarted, and
// the scenario must end exactly as the learning run did.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	learning := newCrashRun(t, 0)
	want := learning.scenario(t)
	learned := objectWrites(learning.c.proxy.Writes())
	for i, w := range learned {
		t.Logf("write %d: %v", i+1, w)
	}
	if len(learned) == 0 {
		t.Fatal("the learning run made no writes")
	}

	var (
		mu         sync.Mutex
		crashes    int
		notReached []int
		recoveries []time.Duration
	)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		slices.Sort(recoveries)
		fmt.Printf("faults: crash points (create, scale, rename, delete): %d writes learned, %d crashes, %d not reached %v, all converged to the learning run's end state and left nothing after the delete; recovery median %.1fs, max %.1fs\n",
			len(learned), crashes, len(notReached), notReached, percentile(recoveries, 0.5).Seconds(), percentile(recoveries, 1).Seconds())
	})
	for k := 1; k <= len(learned); k++ {
		t.Run(fmt.Sprintf("kill after write %d", k), func(t *testing.T) {
			t.Parallel()
			r := newCrashRun(t, k)
			got := r.scenario(t)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("end state differs from the learning run's (-want +got):\n%s", diff)
			}
			checkInvariants(t, r.ns, nil)

			r.mu.Lock()
			defer r.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if r.killedAt.IsZero() {
				t.Logf("the run made %d writes, the kill never came", r.writes)
				notReached = append(notReached, k)
				return
			}
			crashes++
			recoveries = append(recoveries, r.recovery)
			t.Logf("killed after %v; converged %v later", r.killed, r.recovery.Round(time.Millisecond))
		})
	}
}

// percentile is the p-th of sorted durations, 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}
