// Free ports for the components, claimed so that the harness's programs running at once
// do not hand out the same one.

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
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
// chooses outside the ephemeral range, where the kernel does not pick, and claims each
// port by binding a unix socket named for it in the abstract namespace, which every
// program of this harness in the same network namespace sees: no file, no permissions,
// no TMPDIR to agree on, and the kernel frees it when the program exits, however it
// exits. The TCP ports themselves stay free for the children, bound only for a moment
// to check that nothing listens there.

// minChildPort is the lowest port FreePorts hands out: above the well-known ports of
// the components (etcd's 2379, the kubelet's 10250, ...).
const minChildPort = 20000

// minRangeSize is the fewest ports outside the ephemeral range worth choosing from;
// with fewer on either side, FreePorts chooses in the ephemeral range itself.
const minRangeSize = 1000

// ports holds the claims of the ports this program has handed out, open until it
// exits: a port is handed out once per program, and never while another holds it.
var ports = struct {
	sync.Mutex
	claimed map[int]net.Listener
}{claimed: map[int]net.Listener{}}

// portRange returns the ports FreePorts chooses from, [lo, hi).
var portRange = childPortRange

// firstPort returns where in [lo, hi) FreePorts starts looking, so that programs
// started together do not all start at the same port; a test fixes it.
var firstPort = func(lo, hi int) int { return lo + rand.IntN(hi-lo) }

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago, for
// passing to a child as flags. No port is handed out twice by this program, or while
// another program of this harness holds it; a program outside it may still bind one
// first, which the caller sees as the child failing to start.
func FreePorts(ctx context.Context, n int) (_ []int, err error) {
	lo, hi, err := portRange()
	if err != nil {
		return nil, err
	}
	ports.Lock()
	defer ports.Unlock()
	chosen := make([]int, 0, n)
	defer func() {
		if err != nil {
			// Given back, for this program or another to hand out.
			for _, port := range chosen {
				ports.claimed[port].Close()
				delete(ports.claimed, port)
			}
		}
	}()
	start := firstPort(lo, hi)
	for i := 0; i < hi-lo && len(chosen) < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		port := lo + (start-lo+i)%(hi-lo)
		if _, ok := ports.claimed[port]; ok {
			continue
		}
		claim, ok, err := claimPort(ctx, port)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !bindable(ctx, port) {
			claim.Close()
			continue
		}
		ports.claimed[port] = claim
		chosen = append(chosen, port)
	}
	if len(chosen) < n {
		return nil, fmt.Errorf("finding %d free ports in [%d, %d): found %d", n, lo, hi, len(chosen))
	}
	return chosen, nil
}

// claimPort binds the abstract unix socket named for port, or reports !ok when another
// program holds it.
func claimPort(ctx context.Context, port int) (_ net.Listener, ok bool, _ error) {
	// A leading @ names a socket in the abstract namespace.
	l, err := (&net.ListenConfig{}).Listen(ctx, "unix", "@sample-controller-localcluster-port-"+strconv.Itoa(port))
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("claiming port %d: %w", port, err)
	}
	return l, true, nil
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

// childPortRange returns the ports FreePorts chooses from: the larger of the two runs
// outside the kernel's ephemeral range, from minChildPort up, or the ephemeral range
// itself when neither has minRangeSize ports.
func childPortRange() (lo, hi int, err error) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, fmt.Errorf("reading the ephemeral port range: %w", err)
	}
	return portRangeOutside(string(data))
}

// portRangeOutside parses ip_local_port_range ("32768\t60999\n") and returns the range
// childPortRange describes.
func portRangeOutside(ephemeral string) (lo, hi int, err error) {
	fields := strings.Fields(ephemeral)
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("ephemeral port range %q: want two numbers", ephemeral)
	}
	first, err1 := strconv.Atoi(fields[0])
	last, err2 := strconv.Atoi(fields[1])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("ephemeral port range %q: %w", ephemeral, err)
	}
	if first < 1 || last < first || last > 65535 {
		return 0, 0, fmt.Errorf("ephemeral port range %q: want two ports, the first no higher", ephemeral)
	}
	belowLo, belowHi := minChildPort, first
	aboveLo, aboveHi := max(last+1, minChildPort), 65536
	below, above := belowHi-belowLo, aboveHi-aboveLo
	switch {
	case below >= minRangeSize && below >= above:
		return belowLo, belowHi, nil
	case above >= minRangeSize:
		return aboveLo, aboveHi, nil
	}
	return first, last + 1, nil
}
