package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// leaderWait bounds every wait of these tests; a term takes about a second.
const leaderWait = 10 * time.Second

// leaderOptions are short election timings, so that a test sees a whole term.
func leaderOptions() options {
	return options{
		leaderElectNamespace:     "kube-system",
		leaderElectName:          "sample-controller",
		leaderElectLeaseDuration: time.Second,
		leaderElectRenewDeadline: 500 * time.Millisecond,
		leaderElectRetryPeriod:   100 * time.Millisecond,
	}
}

func getLease(t *testing.T, client *k8sfake.Clientset) *coordinationv1.Lease {
	t.Helper()
	lease, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the Lease: %v", err)
	}
	return lease
}

// TestRunAsLeader checks a whole term: run starts once the Lease is taken, a
// cancellation stops run before the Lease is released, and run's error is returned.
func TestRunAsLeader(t *testing.T) {
	for name, runErr := range map[string]error{"run returns nil": nil, "run fails": errors.New("informer failed")} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			client := k8sfake.NewClientset()

			started := make(chan struct{})
			var releasedBeforeRunReturned bool
			done := make(chan error, 1)
			go func() {
				done <- runAsLeader(ctx, client, leaderOptions(), nil, nil, func(ctx context.Context) error {
					close(started)
					<-ctx.Done()
					// The Lease is still held while run winds down.
					lease := getLease(t, client)
					releasedBeforeRunReturned = ptr.Deref(lease.Spec.HolderIdentity, "") == ""
					return runErr
				})
			}()

			select {
			case <-started:
			case <-time.After(leaderWait):
				t.Fatal("run did not start: the Lease was never taken")
			}
			if holder := ptr.Deref(getLease(t, client).Spec.HolderIdentity, ""); holder == "" {
				t.Fatal("run started, but the Lease has no holder")
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, runErr) || (runErr == nil && err != nil) {
					t.Errorf("runAsLeader() = %v, want %v", err, runErr)
				}
			case <-time.After(leaderWait):
				t.Fatal("runAsLeader did not return after cancellation")
			}
			if releasedBeforeRunReturned {
				t.Error("the Lease was released before run returned: a new leader could work beside this one")
			}
			if holder := ptr.Deref(getLease(t, client).Spec.HolderIdentity, ""); holder != "" {
				t.Errorf("after return the Lease is held by %q, want it released", holder)
			}
		})
	}
}

// TestRunAsLeaderCancelledWhileWaiting checks that a replica that never led returns
// on cancellation without running and without touching the leader's Lease.
func TestRunAsLeaderCancelledWhileWaiting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renewed := metav1.NewMicroTime(time.Now())
	client := k8sfake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "sample-controller", Namespace: "kube-system"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("the-leader"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &renewed,
			RenewTime:            &renewed,
		},
	})

	done := make(chan error, 1)
	go func() {
		done <- runAsLeader(ctx, client, leaderOptions(), nil, nil, func(context.Context) error {
			t.Error("run was called while another replica holds the Lease")
			return nil
		})
	}()
	// Let it try to acquire the Lease twice.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, leaderWait, true, func(context.Context) (bool, error) {
		gets := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
				gets++
			}
		}
		return gets >= 2, nil
	})
	if err != nil {
		t.Fatalf("the elector never tried to acquire the Lease: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runAsLeader() = %v, want nil", err)
		}
	case <-time.After(leaderWait):
		t.Fatal("runAsLeader did not return after cancellation")
	}
	if holder := ptr.Deref(getLease(t, client).Spec.HolderIdentity, ""); holder != "the-leader" {
		t.Errorf("the Lease is held by %q, want the-leader", holder)
	}
}

// TestIdentity checks that a process in a Pod is named by the Pod, so that a container
// restarted in place takes back its own Leases, and that any other process gets a
// name of its own.
func TestIdentity(t *testing.T) {
	hostname := func() (string, error) { return "laptop", nil }
	env := func(vars map[string]string) func(string) string {
		return func(key string) string { return vars[key] }
	}
	inPod := env(map[string]string{podNameEnv: "sample-controller-5d9c7-x2x4z", podUIDEnv: "0b1c2d3e"})
	first, err := identityFrom(inPod, hostname)
	if err != nil {
		t.Fatal(err)
	}
	if first != "sample-controller-5d9c7-x2x4z_0b1c2d3e" {
		t.Errorf("in a Pod: identity %q, want the Pod's name and UID", first)
	}
	if restarted, _ := identityFrom(inPod, hostname); restarted != first {
		t.Errorf("a restarted container is %q, want %q as before", restarted, first)
	}
	// Only the name: a Pod recreated under the same name must not pass for the old one.
	for _, vars := range []map[string]string{nil, {podNameEnv: "sample-controller-0"}} {
		a, errA := identityFrom(env(vars), hostname)
		b, errB := identityFrom(env(vars), hostname)
		if errA != nil || errB != nil || a == b || !strings.HasPrefix(a, "laptop_") {
			t.Errorf("with %v: identities %q and %q (%v, %v), want two different ones of the host", vars, a, b, errA, errB)
		}
	}
	if _, err := identityFrom(env(nil), func() (string, error) { return "", errors.New("no hostname") }); err == nil {
		t.Error("no error without a hostname")
	}
}
