package election

import (
	"errors"
	"strings"
	"testing"
)

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
