package localcluster

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// portHolderEnv makes the test binary another program of the harness: it takes three
// ports with FreePorts, looking first at the port the variable names, prints them, and
// holds them until its standard input closes.
const portHolderEnv = "LOCALCLUSTER_PORT_HOLDER"

func portHolder(first string) int {
	start, err := strconv.Atoi(first)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	firstPort = func(int, int) int { return start }
	chosen, err := FreePorts(context.Background(), 3)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(strings.Trim(fmt.Sprint(chosen), "[]"))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// startAt makes FreePorts look first at port, for the rest of the test.
func startAt(t *testing.T, port int) {
	saved := firstPort
	t.Cleanup(func() { firstPort = saved })
	firstPort = func(int, int) int { return port }
}

// somewhereInRange returns a random port of FreePorts' range with room after it.
func somewhereInRange(t *testing.T) int {
	t.Helper()
	lo, hi, err := portRange()
	if err != nil {
		t.Fatal(err)
	}
	if hi-lo <= 100 {
		t.Fatalf("FreePorts' range [%d, %d) has too few ports for this test", lo, hi)
	}
	return lo + rand.IntN(hi-lo-100)
}

// unclaimedAndFree reports whether no program of the harness, this one included, holds
// port and nothing listens on it, now.
func unclaimedAndFree(t *testing.T, port int) bool {
	t.Helper()
	claim, ok, err := claimPort(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return false
	}
	defer claim.Close()
	return bindable(t.Context(), port)
}

func TestFreePortsAreDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 3 {
		ports, err := FreePorts(t.Context(), 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 5 {
			t.Fatalf("FreePorts(5) returned %d ports", len(ports))
		}
		for _, port := range ports {
			if seen[port] {
				t.Errorf("port %d handed out twice", port)
			}
			seen[port] = true
		}
	}
}

func TestFreePortsAreOutsideTheEphemeralRange(t *testing.T) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(data))
	first, err1 := strconv.Atoi(fields[0])
	last, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("ip_local_port_range: %q", data)
	}
	lo, hi, err := portRange()
	if err != nil {
		t.Fatal(err)
	}
	// Where too few ports lie outside it, the range is the ephemeral one itself.
	fallback := lo == first && hi == last+1
	chosen, err := FreePorts(t.Context(), 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range chosen {
		if ephemeral := port >= first && port <= last; ephemeral != fallback || port < lo || port >= hi {
			t.Errorf("port %d: in the ephemeral range [%d, %d] is %v, want %v; want it in [%d, %d)", port, first, last, ephemeral, fallback, lo, hi)
		}
	}
}

func TestFreePortsSkipPortsInUse(t *testing.T) {
	// A listener on a port of the range, and FreePorts looking there first.
	var l net.Listener
	for l == nil {
		var err error
		l, err = (&net.ListenConfig{}).Listen(t.Context(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(somewhereInRange(t))))
		if err != nil {
			l = nil
		}
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	startAt(t, taken)
	ports, err := FreePorts(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if ports[0] == taken {
		t.Errorf("FreePorts handed out port %d, which a listener holds", taken)
	}
}

func TestFreePortsGiveBackWhatAFailedCallClaimed(t *testing.T) {
	// A range of three ports, the first two free and unclaimed (earlier tests of this
	// program hold some ports of the range for good), the last held by a listener.
	var l net.Listener
	var first int
	for l == nil {
		first = somewhereInRange(t)
		if !unclaimedAndFree(t, first) || !unclaimedAndFree(t, first+1) {
			continue
		}
		l, _ = (&net.ListenConfig{}).Listen(t.Context(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first+2)))
	}
	defer l.Close()
	saved := portRange
	t.Cleanup(func() { portRange = saved })
	portRange = func() (int, int, error) { return first, first + 3, nil }
	startAt(t, first)

	if chosen, err := FreePorts(t.Context(), 3); err == nil {
		t.Fatalf("FreePorts(3) = %v with one of the three ports taken", chosen)
	}
	// The two it claimed before it failed are free again.
	chosen, err := FreePorts(t.Context(), 2)
	if err != nil {
		t.Fatalf("FreePorts(2) after a failed FreePorts(3): %v", err)
	}
	if !slices.Equal(chosen, []int{first, first + 1}) {
		t.Errorf("FreePorts(2) = %v, want [%d %d]", chosen, first, first+1)
	}
}

func TestFreePortsSkipPortsAnotherProgramHolds(t *testing.T) {
	// Another test program of the harness, as make test runs several at once, takes
	// three ports looking from start; then this one looks from there too.
	start := somewhereInRange(t)
	holder := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), portHolderEnv+"="+strconv.Itoa(start))
	holder.Stderr = os.Stderr
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := holder.Wait(); err != nil {
			t.Errorf("the other program: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the other program's ports: %v", err)
	}
	var theirs []int
	for _, f := range strings.Fields(line) {
		port, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("the other program printed %q", line)
		}
		theirs = append(theirs, port)
	}
	if len(theirs) != 3 {
		t.Fatalf("the other program printed %q, want three ports", line)
	}

	startAt(t, start)
	ours, err := FreePorts(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range ours {
		if slices.Contains(theirs, port) {
			t.Errorf("FreePorts handed out port %d, which the other program holds (it has %v, this one got %v)", port, theirs, ours)
		}
	}
}

func TestPortRangeOutside(t *testing.T) {
	for _, tc := range []struct {
		ephemeral string
		lo, hi    int
	}{
		{"32768\t60999\n", minChildPort, 32768},
		{"49152 65535", minChildPort, 49152},
		{"21000 64999", minChildPort, 21000},
		// Too little room below it: above it.
		{"20500 60999", 61000, 65536},
		{"10000 20000", 20001, 65536},
		// Too little room on either side: the ephemeral range itself.
		{"1024 65535", 1024, 65536},
	} {
		lo, hi, err := portRangeOutside(tc.ephemeral)
		if err != nil || lo != tc.lo || hi != tc.hi {
			t.Errorf("portRangeOutside(%q) = %d, %d, %v; want %d, %d", tc.ephemeral, lo, hi, err, tc.lo, tc.hi)
		}
	}
	for _, bad := range []string{"", "32768", "a 60999", "32768 b", "60999 32768", "0 100", "1024 70000"} {
		if lo, hi, err := portRangeOutside(bad); err == nil {
			t.Errorf("portRangeOutside(%q) = %d, %d; want an error", bad, lo, hi)
		}
	}
}
