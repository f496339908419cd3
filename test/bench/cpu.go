package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// The processes whose CPU time a cold start reads: on the 2 cores they share, what one
// spends the others do not get.
const (
	cpuAPIServer  = "apiserver"
	cpuEtcd       = "etcd"
	cpuController = "controller" // ours, or every replica of a replica set
	cpuBench      = "bench"      // this process: the limit's writes, and its watch
)

var cpuProcesses = []string{cpuAPIServer, cpuEtcd, cpuController, cpuBench}

// userHZ is the unit of the times in /proc/PID/stat, the same on every Linux.
const userHZ = 100

// sampleCPU reads the CPU time, user and system, that each process of the session has
// used since it started, in seconds. A process that is not running, or whose times
// cannot be read (not Linux), is left out: a replica killed by a case, say.
func sampleCPU(s *session) map[string]float64 {
	pids := map[string][]int{cpuBench: {os.Getpid()}}
	if s.cluster != nil {
		for name, component := range map[string]string{cpuAPIServer: localcluster.ComponentAPIServer, cpuEtcd: localcluster.ComponentEtcd} {
			if p := s.cluster.Component(component); p != nil {
				pids[name] = append(pids[name], p.Pid())
			}
		}
	}
	if s.proc != nil {
		pids[cpuController] = append(pids[cpuController], s.proc.Pid())
	}
	for _, c := range s.processes {
		pids[cpuController] = append(pids[cpuController], c.Pid())
	}
	out := map[string]float64{}
	for name, list := range pids {
		for _, pid := range list {
			if seconds, err := processCPU(pid); err == nil {
				out[name] += seconds
			}
		}
	}
	return out
}

// processCPU is the user and system time of process pid and of all its threads, from
// /proc/PID/stat.
func processCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(data))
}

// parseStatCPU reads utime and stime, the 14th and 15th fields of a /proc/PID/stat
// line, counting from the first field after the command, which may hold spaces and
// parentheses and ends at the last ")".
func parseStatCPU(stat string) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command in %q", stat)
	}
	fields := strings.Fields(stat[end+1:]) // from the 3rd field, the state
	if len(fields) < 13 {
		return 0, fmt.Errorf("too few fields in %q", stat)
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the CPU times of %q: %w", stat, err)
		}
		ticks += n
	}
	return float64(ticks) / userHZ, nil
}

// cpuSince is what each process used between two samples, for those in both; a
// process started in between (the controller) counts from 0.
func cpuSince(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, v := range after {
		out[name] = v - before[name]
	}
	return out
}

// cpuPerFooText is each process's CPU per Foo, in ms, and their sum: "apiserver 3.51,
// etcd 0.59, controller 0.74, bench 0.30; all 5.13 ms of CPU per Foo".
func cpuPerFooText(cpu map[string]float64, foos int) string {
	if len(cpu) == 0 || foos == 0 {
		return ""
	}
	var parts []string
	all := 0.0
	for _, name := range cpuProcesses {
		if v, ok := cpu[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, v/float64(foos)*1000))
			all += v
		}
	}
	return fmt.Sprintf("%s; all %.2f ms of CPU per Foo", strings.Join(parts, ", "), all/float64(foos)*1000)
}
