package localcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Ports for children are chosen by this program and passed to them as flags, so each
// may be taken by someone else between the choice and the child's bind. Two kinds of
// someone else, seen here: the kernel, which gives every outgoing connection a source
// port from its ephemeral range (a suite's clients make thousands), and the other test
// programs of `make test`, which run in parallel and choose ports too. So FreePorts
// chooses below the ephemeral range, where the kernel does not pick, and claims each
// port with a lock on a file that every program of this harness honors, held until the
// program exits.

// minChildPort is the lowest port FreePorts hands out: above the well-known ports of
// the components (etcd's 2379, the kubelet's 10250, ...).
const minChildPort = 20000

// minRangeSize is the fewest ports below the ephemeral range worth choosing from;
// with fewer, FreePorts chooses in the ephemeral range itself.
const minRangeSize = 1000

// ports holds the lock files of the ports this program has claimed, open until it
// exits: a port is handed out once per program, and never while another holds it.
var ports = struct {
	sync.Mutex
	claimed map[int]*os.File
}{claimed: map[int]*os.File{}}

// portRange returns the ports FreePorts chooses from, [lo, hi).
var portRange = childPortRange

// firstPort returns where in [lo, hi) FreePorts starts looking, so that programs
// started together do not all start at the same port; a test fixes it.
var firstPort = func(lo, hi int) int { return lo + rand.IntN(hi-lo) }

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago, for
// passing to a child as flags. No port is handed out twice by this program, or while
// another program of this harness holds it; a program outside it may still bind one
// first, which the caller sees as the child failing to start.
func FreePorts(ctx context.Context, n int) ([]int, error) {
	lo, hi, err := portRange()
	if err != nil {
		return nil, err
	}
	ports.Lock()
	defer ports.Unlock()
	chosen := make([]int, 0, n)
	start := firstPort(lo, hi)
	for i := 0; i < hi-lo && len(chosen) < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		port := lo + (start-lo+i)%(hi-lo)
		if _, ok := ports.claimed[port]; ok {
			continue
		}
		lock, err := claimPort(port)
		if err != nil {
			return nil, err
		}
		if lock == nil {
			continue
		}
		if !bindable(ctx, port) {
			lock.Close()
			continue
		}
		ports.claimed[port] = lock
		chosen = append(chosen, port)
	}
	if len(chosen) < n {
		return nil, fmt.Errorf("finding %d free ports in [%d, %d): found %d", n, lo, hi, len(chosen))
	}
	return chosen, nil
}

// claimPort takes the lock on port's file, or returns nil when another program (or
// another FreePorts of this one) holds it.
func claimPort(port int) (*os.File, error) {
	dir := filepath.Join(os.TempDir(), "localcluster-ports")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("claiming a port: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("claiming port %d: %w", port, err)
	}
	// flock's locks belong to the open file, so a second open in this program is
	// refused too; the kernel drops them when the program exits, however it exits.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("claiming port %d: %w", port, err)
	}
	return f, nil
}

// bindable reports whether nothing listens on port on 127.0.0.1 now.
func bindable(ctx context.Context, port int) bool {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// childPortRange returns the ports from minChildPort up to the kernel's ephemeral
// range, or that range itself when too few lie below it.
func childPortRange() (lo, hi int, err error) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, fmt.Errorf("reading the ephemeral port range: %w", err)
	}
	return portRangeBelow(string(data))
}

// portRangeBelow parses ip_local_port_range ("32768\t60999\n") and returns the range
// childPortRange describes.
func portRangeBelow(ephemeral string) (lo, hi int, err error) {
	fields := strings.Fields(ephemeral)
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("ephemeral port range %q: want two numbers", ephemeral)
	}
	first, err1 := strconv.Atoi(fields[0])
	last, err2 := strconv.Atoi(fields[1])
	if err := errors.Join(err1, err2); err != nil || first < 1 || last < first || last > 65535 {
		return 0, 0, fmt.Errorf("ephemeral port range %q: want two ports, the first no higher", ephemeral)
	}
	if first-minChildPort >= minRangeSize {
		return minChildPort, first, nil
	}
	return first, last + 1, nil
}
