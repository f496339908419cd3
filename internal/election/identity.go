// The identity a process takes in Leases.

package election

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/uuid"
)

// Environment variables that name the Pod this process runs in, from the downward API
// (artifacts/deploy sets them).
const (
	podNameEnv = "POD_NAME"
	podUIDEnv  = "POD_UID"
)

// Identity names this process in Leases. In a Pod it is the Pod's name and UID,
// which a container restarted in place (a crash, an OOM kill, the exit on a lost
// Lease) keeps: it takes back its own member and slot Leases at once instead of
// announcing a new member while its old one lingers. The previous container has
// exited before the kubelet restarts it, and a Pod recreated under the same name has
// another UID. Elsewhere it is the host name and a UUID, new for every process.
func Identity() (string, error) {
	return identityFrom(os.Getenv, os.Hostname)
}

func identityFrom(getenv func(string) string, hostname func() (string, error)) (string, error) {
	if name, uid := getenv(podNameEnv), getenv(podUIDEnv); name != "" && uid != "" {
		return name + "_" + uid, nil
	}
	host, err := hostname()
	if err != nil {
		return "", fmt.Errorf("getting the hostname for the Lease identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}
